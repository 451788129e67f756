// Package joinsecret says which Secrets a NodeClass may name as its join
// Secret, and reads only those. A join Secret ends up in a node's machine
// config, whose configPatches can run privileged static pods, so a NodeClass
// author must not be able to feed the controller any Secret of the cluster:
// only Secrets in the namespaces the operator listed (the chart's
// rbac.joinSecretNamespaces, JOIN_SECRET_NAMESPACES; by default the
// controller's own namespace), and never the controller's own Secrets. The
// chart grants `get` on Secrets in those namespaces only, so this check and
// RBAC agree; the check runs first and gives a clear reason instead of a
// Forbidden.
package joinsecret

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Scope is the set of Secrets join material may come from.
type Scope struct {
	// Namespaces whose Secrets may be join Secrets.
	Namespaces []string
	// Reserved are Secrets that are never join material (the controller's
	// rescue SSH key), even in an allowed namespace.
	Reserved []types.NamespacedName
}

// ParseNamespaces reads a comma-separated namespace list (JOIN_SECRET_NAMESPACES).
func ParseNamespaces(s string) ([]string, error) {
	var out []string
	for _, ns := range strings.Split(s, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// NotAllowedError says a NodeClass names a Secret outside the Scope.
type NotAllowedError struct {
	Secret     types.NamespacedName
	Namespaces []string
	Reserved   bool
}

func (e *NotAllowedError) Error() string {
	if e.Reserved {
		return fmt.Sprintf("Secret %s is one of the controller's own Secrets, not join material", e.Secret)
	}
	return fmt.Sprintf("Secret %s is in namespace %s, but the controller reads join Secrets only in %s: move it there, or add the namespace to the chart's rbac.joinSecretNamespaces (JOIN_SECRET_NAMESPACES)",
		e.Secret, e.Secret.Namespace, strings.Join(e.Namespaces, ", "))
}

// Allows returns nil when the Secret may be a join Secret, else a *NotAllowedError.
func (s Scope) Allows(secret types.NamespacedName) error {
	if slices.Contains(s.Reserved, secret) {
		return &NotAllowedError{Secret: secret, Namespaces: s.Namespaces, Reserved: true}
	}
	if !slices.Contains(s.Namespaces, secret.Namespace) {
		return &NotAllowedError{Secret: secret, Namespaces: s.Namespaces}
	}
	return nil
}

// Reader reads Secrets within Scope only: a Get outside it fails with a
// *NotAllowedError without reaching the API server, and Secrets are never
// listed. Other objects pass through.
type Reader struct {
	client.Reader
	Scope Scope
}

// Get implements client.Reader.
func (r Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		if err := r.Scope.Allows(key); err != nil {
			return err
		}
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// errNoList: join Secrets are read by name only.
var errNoList = errors.New("join Secrets are read by name; listing Secrets is not allowed")

// List implements client.Reader.
func (r Reader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.SecretList); ok {
		return errNoList
	}
	return r.Reader.List(ctx, list, opts...)
}
