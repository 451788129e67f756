package world

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterID is the identity the controller tags servers with by default:
// the UID of the world's kube-system namespace.
func (w *World) ClusterID(ctx context.Context) (string, error) {
	ns, err := w.Clientset.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("kube-system namespace: %w", err)
	}
	return string(ns.UID), nil
}

// ClusterTags are the tags that make a server the world's cluster's: its
// name and its identity.
func (w *World) ClusterTags(ctx context.Context) ([]string, error) {
	id, err := w.ClusterID(ctx)
	if err != nil {
		return nil, err
	}
	return []string{TagManagedBy + "=" + w.ClusterName, TagClusterID + "=" + id}, nil
}
