// Command etcd is etcd's own main (go.etcd.io/etcd/server/v3/etcdmain) at
// the version k8s.io/kubernetes requires, so that it builds in this module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
