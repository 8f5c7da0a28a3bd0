// lab-node: a Tailscale node for the tests' lab (tools/real_tools.py builds it with the pinned tailscale.com).
//
// It joins a control server with a pre-auth key, as `tailscale up --auth-key` would on a subnet router, prints
// the backend state and the node's name once it is running, and exits: enough to spend a key for real. It runs in
// userspace (tsnet): no TUN device, no root, no route to the tailnet.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"tailscale.com/tsnet"
)

func main() {
	control := flag.String("control", "", "the control server's URL")
	authKey := flag.String("authkey", "", "the pre-auth key to join with")
	hostname := flag.String("hostname", "lab-node", "the node's hostname")
	dir := flag.String("dir", "", "the node's state directory")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to wait until the node runs")
	flag.Parse()
	node := &tsnet.Server{
		ControlURL: *control,
		AuthKey:    *authKey,
		Hostname:   *hostname,
		Dir:        *dir,
		Logf:       func(string, ...any) {},
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	status, err := node.Up(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lab-node:", err)
		os.Exit(1)
	}
	fmt.Println(status.BackendState, status.Self.HostName)
	node.Close()
}
