package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Kubeconfig returns a kubeconfig (clientcmd's YAML) that reaches the API
// server as the administrator; cluster names its cluster and context.
func (e *Env) Kubeconfig(cluster string) ([]byte, error) {
	if e == nil || e.Config == nil {
		return nil, fmt.Errorf("envtest: Kubeconfig: the control plane is not running")
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[cluster] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.Config.CertData, ClientKeyData: e.Config.KeyData, Token: e.Config.BearerToken}
	kc.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: "admin"}
	kc.CurrentContext = cluster
	return clientcmd.Write(*kc)
}

// KubeconfigSecret returns the Secret Cluster API writes for a cluster
// whose workload cluster is this API server: <cluster>-kubeconfig in
// namespace, with the cluster-name label, type cluster.x-k8s.io/secret and
// the kubeconfig (Kubeconfig) under the key "value". Create it in the
// management cluster to reach this API server as that cluster's workload
// cluster.
func (e *Env) KubeconfigSecret(namespace, cluster string) (*corev1.Secret, error) {
	raw, err := e.Kubeconfig(cluster)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster + "-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": raw},
	}, nil
}
