//go:build tools

// Package upstream names the main packages `make upstream` builds.
package upstream

import (
	_ "github.com/projectcalico/calico/calicoctl/calicoctl"
	_ "github.com/projectcalico/calico/felix/cmd/calico-felix"
)
