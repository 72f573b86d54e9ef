// Command etcdget prints the raw value stored in etcd under one key, as the
// kube-apiserver wrote it (no decoding), using the etcd v3 client that
// k8s.io/kubernetes itself requires.
//
//	etcdget --endpoint http://127.0.0.1:2379 /registry/secrets/default/name
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	endpoint := flag.String("endpoint", "http://127.0.0.1:2379", "etcd client URL")
	timeout := flag.Duration("timeout", 10*time.Second, "overall deadline")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: etcdget [--endpoint URL] KEY")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: *timeout, Logger: nil})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdget:", err)
		os.Exit(1)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdget:", err)
		os.Exit(1)
	}
	if len(resp.Kvs) == 0 {
		fmt.Fprintf(os.Stderr, "etcdget: key %q not found\n", flag.Arg(0))
		os.Exit(3)
	}
	os.Stdout.Write(resp.Kvs[0].Value)
}
