package world

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceAccountKubeconfig is a kubeconfig for the world's API server that
// authenticates with an hour's token of ServiceAccount namespace/name: a
// controller run with it has that ServiceAccount's RBAC and nothing more,
// as a pod with the token mounted would.
func (w *World) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) ([]byte, error) {
	tr, err := w.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("a token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"world": {Server: w.Kube.Config.Host, CertificateAuthorityData: w.Kube.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"world": {Cluster: "world", AuthInfo: name}},
		CurrentContext: "world",
	})
}
