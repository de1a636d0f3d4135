package leader

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/pools"
)

// PolicyParams is the ConfigMap, in the node process's namespace, that
// the admission policy reads: every pool's name and the bounds of its
// ranges (pools.Set.Published), written by the leader.
const PolicyParams = "external-ip-pools"

// writeStatus gives every pool its counts and its Ready condition.
func (l *leader) writeStatus(ctx context.Context) {
	counts := map[string]pools.Count{}
	for _, c := range l.Counts() {
		counts[c.Pool] = c
	}
	for _, p := range l.Set().All() {
		want := p.Obj.DeepCopy()
		c := counts[p.Name()]
		want.Status.Size, want.Status.Used, want.Status.Free = c.Size, c.Used, c.Free()
		want.Status.ObservedGeneration = p.Obj.Generation
		cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: p.Reason, Message: "gives IPs", ObservedGeneration: p.Obj.Generation}
		if !p.Ready() {
			cond.Status, cond.Message = metav1.ConditionFalse, p.Refused
		}
		meta.SetStatusCondition(&want.Status.Conditions, cond)
		if equality.Semantic.DeepEqual(want.Status, p.Obj.Status) {
			continue
		}
		if err := l.updateStatus(ctx, want); err != nil && !apierrors.IsConflict(err) {
			l.log.Warn("claims: writing a pool's status", "pool", p.Name(), "error", err)
		}
	}
}

func (l *leader) updateStatus(ctx context.Context, p *v1alpha1.ExternalIPPool) error {
	ctx, cancel := context.WithTimeout(ctx, apiclient.RequestTimeout)
	defer cancel()
	_, err := l.cfg.Clients.Pools.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// writePolicyParams keeps the admission policy's view of the pools.
func (l *leader) writePolicyParams(ctx context.Context) {
	data := l.Set().Published()
	cms := l.cfg.Clients.Kube.CoreV1().ConfigMaps(l.cfg.Namespace)
	cm, err := cms.Get(ctx, PolicyParams, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: PolicyParams, Namespace: l.cfg.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "external-ip"}}, Data: data}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	case err == nil && !maps.Equal(cm.Data, data):
		cm.Data = data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		l.log.Warn("claims: writing the admission policy's pools", "configmap", l.cfg.Namespace+"/"+PolicyParams, "error", err)
	}
}
