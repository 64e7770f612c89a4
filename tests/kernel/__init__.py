"""Real-kernel test helpers: throwaway namespaces, veths and real packets."""
