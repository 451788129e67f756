// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3/etcdmain),
// built from the Go module proxy for envtest: upstream's own main package lives
// in a module (go.etcd.io/etcd/v3) that replaces its siblings with local paths
// and so cannot be built as a dependency.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
