// Command claimsdriver drives node processes (external-ip-node) through
// their socket as the plugin does (package nodeapi: the intent first, then
// the request), against a real API server, for test/e2e/claims.sh. It makes
// the pods the requests are for and prints what it saw as one JSON line;
// the recipe asserts.
//
//	claimsdriver race   -kubeconfig F -nodes DIR=NODE,DIR=NODE -pods N -pool P -namespace NS
//	claimsdriver cycles -kubeconfig F -nodes DIR=NODE -pods N -pool P -namespace NS
//	claimsdriver retry  -kubeconfig F -nodes DIR=NODE -pods N -pool P -namespace NS -ready FILE -stop FILE
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// node is one node process: its data dir (the socket, the intents) and name.
type node struct{ dir, name string }

type driver struct {
	kube     kubernetes.Interface
	nodes    []node
	pods     int
	pool, ns string
	ready    string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: claimsdriver race|cycles|retry FLAGS")
		os.Exit(2)
	}
	d, stop, err := parse(os.Args[1], os.Args[2:])
	if err == nil {
		var result any
		switch os.Args[1] {
		case "race":
			result, err = d.race()
		case "cycles":
			result, err = d.cycles()
		case "retry":
			result, err = d.retry(stop)
		default:
			err = fmt.Errorf("unknown command %q", os.Args[1])
		}
		if err == nil {
			err = json.NewEncoder(os.Stdout).Encode(result)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "claimsdriver: %v\n", err)
		os.Exit(1)
	}
}

func parse(cmd string, args []string) (*driver, string, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "the API server's kubeconfig")
	nodes := fs.String("nodes", "", "DIR=NODE,...: each node process's data dir and node name")
	stop := fs.String("stop", "", "retry: a file that exists while the API server is stopped")
	d := &driver{}
	fs.StringVar(&d.ready, "ready", "", "retry: a file made once the pods are made, before the first request")
	fs.IntVar(&d.pods, "pods", 100, "how many pods")
	fs.StringVar(&d.pool, "pool", "", "the pool they ask")
	fs.StringVar(&d.ns, "namespace", "claims", "their namespace")
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	for _, n := range strings.Split(*nodes, ",") {
		dir, name, ok := strings.Cut(n, "=")
		if !ok {
			return nil, "", fmt.Errorf("-nodes: %q is not DIR=NODE", n)
		}
		d.nodes = append(d.nodes, node{dir, name})
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return nil, "", err
	}
	cfg.QPS, cfg.Burst = 200, 400
	d.kube, err = kubernetes.NewForConfig(cfg)
	return d, *stop, err
}

// pod makes pod i, bound to its node (no scheduler: spec.nodeName).
func (d *driver) pod(ctx context.Context, i int, n node) (*corev1.Pod, error) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: d.ns},
		Spec: corev1.PodSpec{NodeName: n.name, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "localhost/e2e/none:latest"}}}}
	return d.kube.CoreV1().Pods(d.ns).Create(ctx, p, metav1.CreateOptions{})
}

// attachment is the attachment of p's sandbox number try: the kubelet
// makes a new sandbox (a new container ID) for each try of a pod.
func attachment(p *corev1.Pod, try int) store.Attachment {
	return store.Attachment{Network: "claims-e2e", ContainerID: fmt.Sprintf("%s-%d", p.UID, try), IfName: "eth0"}
}

// ask claims for p's sandbox try on n as the plugin's ADD does.
func (d *driver) ask(n node, p *corev1.Pod, try int) (*nodeapi.Response, error) {
	req := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: attachment(p, try), Pool: d.pool,
		Pod: nodeapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
	if err := nodeapi.MarkIntent(n.dir, nodeapi.Marker{Attachment: req.Attachment, Pod: req.Pod}); err != nil {
		return nil, err
	}
	return nodeapi.Client{Socket: nodeapi.SocketPath(n.dir)}.Do(req)
}

// release releases p's sandbox try on n as the plugin's DEL does: at
// once, else deferred.
func (d *driver) release(n node, p *corev1.Pod, try int) error {
	a := attachment(p, try)
	resp, err := nodeapi.Client{Socket: nodeapi.SocketPath(n.dir)}.Do(nodeapi.Request{Op: nodeapi.OpRelease, Attachment: a})
	if err == nil {
		err = resp.Err()
	}
	if err != nil {
		return nodeapi.Defer(n.dir, a)
	}
	return nodeapi.Forget(n.dir, a)
}

// raceResult is what race saw.
type raceResult struct {
	Granted, Exhausted, Other int
	// Twice lists every IP granted to more than one pod.
	Twice  []string
	Errors []string `json:",omitempty"`
}

// race makes the pods first, then asks for all of them at once, half on
// each node.
func (d *driver) race() (*raceResult, error) {
	ctx := context.Background()
	pods := make([]*corev1.Pod, d.pods)
	for i := range pods {
		p, err := d.pod(ctx, i, d.nodes[i%len(d.nodes)])
		if err != nil {
			return nil, err
		}
		pods[i] = p
	}
	resps := make([]*nodeapi.Response, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { resps[i], errs[i] = d.ask(d.nodes[i%len(d.nodes)], p, 0) })
	}
	wg.Wait()
	r := &raceResult{}
	given := map[string]int{}
	for i, resp := range resps {
		switch {
		case errs[i] != nil:
			r.Other++
			r.Errors = append(r.Errors, errs[i].Error())
		case resp.Reason == nodeapi.ReasonPoolExhausted:
			r.Exhausted++
		case resp.Err() != nil || len(resp.Addresses) != 1:
			r.Other++
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %+v", pods[i].Name, resp))
		default:
			r.Granted++
			if given[resp.Addresses[0].String()]++; given[resp.Addresses[0].String()] == 2 {
				r.Twice = append(r.Twice, resp.Addresses[0].String())
			}
		}
	}
	return r, nil
}

// cyclesResult is what cycles saw.
type cyclesResult struct {
	Cycles, Granted int
	Errors          []string `json:",omitempty"`
}

// cycles makes a pod, claims for it, releases, deletes it, d.pods times.
func (d *driver) cycles() (*cyclesResult, error) {
	ctx := context.Background()
	r := &cyclesResult{}
	n := d.nodes[0]
	for i := range d.pods {
		p, err := d.pod(ctx, i, n)
		if err != nil {
			return nil, err
		}
		resp, err := d.ask(n, p, 0)
		if err == nil {
			err = resp.Err()
		}
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", p.Name, err))
		} else {
			r.Granted++
		}
		if err := d.release(n, p, 0); err != nil {
			return nil, err
		}
		if err := d.kube.CoreV1().Pods(d.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
		r.Cycles++
	}
	return r, nil
}

// retryResult is what retry saw.
type retryResult struct {
	Pods, Granted int
	// Unavailable counts answers that said "try again later" (CNI code 11);
	// WhileStopped those of them given while the API server was stopped.
	Unavailable, WhileStopped int
	// Refused counts any other refusal: there must be none.
	Refused  []string `json:",omitempty"`
	Messages []string `json:",omitempty"`
}

// retry makes the pods, then asks for each in turn, as the kubelet retries
// a failed ADD: after a DEL (the release) and again, until it is granted,
// while the recipe stops the API server for a while; then releases them all.
func (d *driver) retry(stopFile string) (*retryResult, error) {
	ctx := context.Background()
	r := &retryResult{Pods: d.pods}
	n := d.nodes[0]
	var pods []*corev1.Pod
	for i := range d.pods {
		p, err := d.pod(ctx, i, n)
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	if err := os.WriteFile(d.ready, nil, 0o600); err != nil {
		return nil, err
	}
	tries := map[*corev1.Pod]int{}
	for _, p := range pods {
		var err error
		if tries[p], err = d.askUntilGranted(n, p, stopFile, r); err != nil {
			return nil, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	for p, try := range tries {
		if err := d.release(n, p, try); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// askUntilGranted returns the try that was granted.
func (d *driver) askUntilGranted(n node, p *corev1.Pod, stopFile string, r *retryResult) (int, error) {
	for try := 0; try < 600; try++ {
		_, stoppedErr := os.Stat(stopFile)
		resp, err := d.ask(n, p, try)
		if err == nil {
			err = resp.Err()
		}
		if err == nil {
			r.Granted++
			return try, nil
		}
		if resp != nil && resp.Unavailable == "" {
			r.Refused = append(r.Refused, fmt.Sprintf("%s: %v", p.Name, err))
			return try, nil
		}
		r.Unavailable++
		if stoppedErr == nil {
			r.WhileStopped++
		}
		if len(r.Messages) < 3 {
			r.Messages = append(r.Messages, err.Error())
		}
		if err := d.release(n, p, try); err != nil { // the kubelet's DEL of the failed sandbox
			return 0, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s: not granted after 600 tries", p.Name)
}
