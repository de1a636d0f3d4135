//go:build metrics && kubernetes

package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/external-ip/external-ip/pkg/claims"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/metrics"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/standby"
	"github.com/external-ip/external-ip/pkg/upkeep"
)

// claimsBuilt is true in the node build with the Kubernetes client
// (external-ip-node); the plugin's own build never links client-go.
const claimsBuilt = true

// startClaims serves the plugin's claims on dataDir's socket until ctx
// ends, with the API server of kubeconfig ("": the pod's own account),
// and returns them as the standby watch's Claims (nil when it serves
// none). A socket that can no longer accept goes to fail, which ends the
// process: a new one listens anew.
func startClaims(ctx context.Context, fail context.CancelCauseFunc, wg *sync.WaitGroup, f *claimFlags, dataDir string, rec upkeep.Recorder, log *slog.Logger) (standby.Claims, error) {
	if f.nodeName == "" {
		return nil, nil
	}
	klog.SetSlogLogger(log) // client-go's own lines, in our log's JSON
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100 // a node's burst of pod ADDs, each a create or two
	cl, err := apiclient.New(cfg)
	if err != nil {
		return nil, err
	}
	c := claims.Config{Clients: cl, NodeName: f.nodeName, DataDir: dataDir, Namespace: f.namespace, Log: log}
	m, _ := rec.(*metrics.Metrics)
	if m != nil {
		c.Recorder = m
	}
	node := claims.New(c)
	if m != nil {
		m.ReadPools(func() []metrics.PoolAddresses { return poolAddresses(node) })
	}
	l, err := nodeapi.Listen(dataDir)
	if err != nil {
		return nil, err
	}
	wg.Go(func() {
		if err := node.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("claims stopped", "error", err)
		}
	})
	wg.Go(func() {
		if err := nodeapi.Serve(ctx, l, claims.Answering(node), log); err != nil {
			log.Error("the node socket stopped accepting; the node process restarts to serve it anew", "error", err)
			fail(err)
		}
	})
	log.Info("serving claims", "node", f.nodeName, "socket", l.Addr().String(), "namespace", f.namespace)
	return claims.NewStandby(ctx, node), nil
}

func poolAddresses(n *claims.Node) []metrics.PoolAddresses {
	var out []metrics.PoolAddresses
	for _, c := range n.PoolCounts() {
		out = append(out, metrics.PoolAddresses{Pool: c.Pool, Used: c.Used, Free: c.Free()})
	}
	return out
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("--node-name: the Kubernetes API from inside the pod: %w (or give --kubeconfig)", err)
	}
	return cfg, nil
}
