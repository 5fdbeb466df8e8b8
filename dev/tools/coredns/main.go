// Tooling only: cluster DNS for the test environment's node, built from the official CoreDNS module with just the
// plugins its Corefile uses (test/env/node.ts). The full plugin set (cloud DNS providers, etcd, dnstap, …) would
// triple the build for nothing a test cluster on one machine needs; the plugins are the module's own.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
