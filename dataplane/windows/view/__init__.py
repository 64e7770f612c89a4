"""What HNS holds, as the platform sees it: the view, kept in step incrementally,
and the spread periodic re-read."""
