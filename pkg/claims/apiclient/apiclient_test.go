package apiclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// watchServer answers every watch with headers at once and one event
// after `after`, then keeps the stream open until the test ends, as an
// API server does for minutes.
func watchServer(t *testing.T, after time.Duration, event string) *httptest.Server {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			http.Error(w, "only watches here", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(after):
		case <-done:
			return
		}
		fmt.Fprintln(w, event)
		w.(http.Flusher).Flush()
		<-done
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return srv
}

// The node process's informers watch for minutes: a Timeout in the REST
// config (client-go's http.Client.Timeout, which also bounds reading a
// watch's body) would end every watch at that period, and every informer
// of every node would reconnect.
func TestAWatchOutlivesTheRESTConfigsTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	watches := map[string]struct {
		event string
		open  func(*Clients) (watch.Interface, error)
	}{
		"claims": {`{"type":"ADDED","object":{"apiVersion":"external-ip.io/v1alpha1","kind":"ExternalIPClaim","metadata":{"name":"192.0.2.1","resourceVersion":"2"}}}`,
			func(c *Clients) (watch.Interface, error) {
				return c.Claims.Watch(context.Background(), metav1.ListOptions{})
			}},
		"pods": {`{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"a","resourceVersion":"2"}}}`,
			func(c *Clients) (watch.Interface, error) {
				return c.Kube.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{})
			}},
	}
	for name, w := range watches {
		t.Run(name, func(t *testing.T) {
			srv := watchServer(t, 3*timeout, w.event)
			cl, err := New(&rest.Config{Host: srv.URL, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			wi, err := w.open(cl)
			if err != nil {
				t.Fatal(err)
			}
			defer wi.Stop()
			select {
			case ev, ok := <-wi.ResultChan():
				if !ok || ev.Type != watch.Added {
					t.Fatalf("the watch ended before the event sent %v after it opened (open %v, event %v %T): the REST config's Timeout %v cut it",
						3*timeout, ok, ev.Type, ev.Object, timeout)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no event, nor the end of the watch, within 10 s")
			}
		})
	}
}
