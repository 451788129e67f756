package removal

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RecordsName is the ConfigMap (in the controller's namespace) that
// remembers the NodeClasses deleted with sparesOnDeletion: Keep.
const RecordsName = "karpenter-scaleway-em-nodeclass-removals"

// Records remembers, once a NodeClass is gone, that it was deleted with
// sparesOnDeletion: Keep: one key per NodeClass name, its value the time of
// the deletion. The finalizer writes it before it ends the spares it lists;
// a spare that listing missed (kept moments before: listings lag) is found
// later by the garbage collector as a spare of a gone NodeClass, and the
// record tells it to hand the spare over as the policy said, not release
// it. Without a record, a spare of a gone NodeClass is released as before.
// A NodeClass created again with the same name drops its record.
type Records struct {
	// Kube must read uncached: a record written moments ago must be seen.
	Kube      client.Client
	Namespace string
	// Name of the ConfigMap; RecordsName when empty.
	Name string
}

func (r *Records) key() types.NamespacedName {
	name := r.Name
	if name == "" {
		name = RecordsName
	}
	return types.NamespacedName{Namespace: r.Namespace, Name: name}
}

// Keep records that NodeClass nodeClass is deleted with sparesOnDeletion: Keep.
func (r *Records) Keep(ctx context.Context, nodeClass string, at time.Time) error {
	cm := &corev1.ConfigMap{}
	err := r.Kube.Get(ctx, r.key(), cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.key().Namespace, Name: r.key().Name},
			Data: map[string]string{nodeClass: at.UTC().Format(time.RFC3339)}}
		if err := r.Kube.Create(ctx, cm); err == nil || !apierrors.IsAlreadyExists(err) {
			return wrap(err, "creating", r.key())
		}
		// Created meanwhile: update it below.
		if err := r.Kube.Get(ctx, r.key(), cm); err != nil {
			return wrap(err, "reading", r.key())
		}
	} else if err != nil {
		return wrap(err, "reading", r.key())
	}
	if _, ok := cm.Data[nodeClass]; ok {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[nodeClass] = at.UTC().Format(time.RFC3339)
	return wrap(r.Kube.Update(ctx, cm), "updating", r.key())
}

// Kept reports whether NodeClass nodeClass was deleted with
// sparesOnDeletion: Keep (and not created again since).
func (r *Records) Kept(ctx context.Context, nodeClass string) (bool, error) {
	cm := &corev1.ConfigMap{}
	if err := r.Kube.Get(ctx, r.key(), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, wrap(err, "reading", r.key())
	}
	_, ok := cm.Data[nodeClass]
	return ok, nil
}

// Forget drops nodeClass's record: a NodeClass of that name exists again,
// and the spares tagged with its name are its own.
func (r *Records) Forget(ctx context.Context, nodeClass string) error {
	cm := &corev1.ConfigMap{}
	if err := r.Kube.Get(ctx, r.key(), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return wrap(err, "reading", r.key())
	}
	if _, ok := cm.Data[nodeClass]; !ok {
		return nil
	}
	delete(cm.Data, nodeClass)
	return wrap(r.Kube.Update(ctx, cm), "updating", r.key())
}

func wrap(err error, what string, key types.NamespacedName) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s the record of nodeclasses deleted with sparesOnDeletion: Keep (configmap %s): %w", what, key, err)
}
