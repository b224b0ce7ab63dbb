// Command etcd is upstream etcd's server entry point, built from the pinned
// go.etcd.io/etcd/server/v3 module (see go.mod).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
