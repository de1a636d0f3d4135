package main

import (
	"errors"
	"flag"
)

// claimFlags turn on the node process's claims (docs/pools.md).
type claimFlags struct {
	nodeName, kubeconfig, namespace string
}

func (f *claimFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nodeName, "node-name", "", "with --watch: serve the cluster's pools and claims to the plugin as this node (the external-ip-node build; the DaemonSet passes spec.nodeName)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "with --node-name: the API server's kubeconfig (default: the pod's service account)")
	fs.StringVar(&f.namespace, "namespace", "external-ip", "with --node-name: the node process's namespace, for its Lease and the admission policy's ConfigMap")
}

func (f *claimFlags) check(watch bool) error {
	if f.nodeName == "" && f.kubeconfig != "" {
		return errors.New("install: --kubeconfig needs --node-name")
	}
	if f.nodeName != "" && !watch {
		return errors.New("install: --node-name needs --watch")
	}
	return nil
}
