package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ControllerManagerOptions configures NewControllerManager. The zero value
// is ready to use.
type ControllerManagerOptions struct {
	// Dir holds the serving certificate and the log. Default: a new
	// temporary directory removed by Stop.
	Dir string
	// Args are extra kube-controller-manager flags; a flag given here comes
	// after testenv's, so it wins.
	Args []string
	// StartTimeout bounds the wait for /healthz. Default 2 minutes.
	StartTimeout time.Duration
}

// ControllerManager is a running kube-controller-manager bound to a Kube.
type ControllerManager struct {
	// Port is the HTTPS port of /healthz and /metrics on 127.0.0.1.
	Port int
	// LogPath is the process's log file.
	LogPath string

	proc    *process
	tempDir string
}

// controllerManagerArgs are the flags every world's kube-controller-manager
// runs with, beyond those shared with kube-scheduler (startComponent).
var controllerManagerArgs = []string{
	"--leader-elect=false",
	// Every controller on by default, as in a cluster. Those that need what
	// this control plane has not (a service-account signing key, a cluster
	// signing CA, a cloud provider, pod CIDRs) stay off by themselves.
	"--controllers=*",
	// Controllers act on the admin identity: the world has no
	// service-account tokens to give them.
	"--use-service-account-credentials=false",
	// Karpenter's suites create and delete hundreds of pods at once; the
	// default 20 requests/s would make the ReplicaSets the bottleneck.
	"--kube-api-qps=200",
	"--kube-api-burst=400",
	"--concurrent-replicaset-syncs=20",
	"--concurrent-deployment-syncs=20",
}

// NewControllerManager runs the real kube-controller-manager against k
// (Deployments and ReplicaSets, Jobs, DaemonSets, the node lifecycle and
// taint eviction, garbage collection...) and waits until it is healthy.
// Call Stop when done.
func NewControllerManager(ctx context.Context, k *Kube, opts ControllerManagerOptions) (*ControllerManager, error) {
	bin, err := FindBinary(BinKubeControllerManager)
	if err != nil {
		return nil, err
	}
	if k == nil || k.KubeconfigPath == "" {
		return nil, fmt.Errorf("kube-controller-manager: Kube is not started (no kubeconfig)")
	}
	m := &ControllerManager{}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "testenv-kcm-"); err != nil {
			return nil, err
		}
		m.tempDir = dir
	}
	m.LogPath = filepath.Join(dir, "kube-controller-manager.log")
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	args := append(append([]string{}, controllerManagerArgs...), opts.Args...)
	err = retryStart(ctx, func() (err error) {
		m.proc, m.Port, err = startComponent(ctx, "kube-controller-manager", bin, k, dir, "/healthz", args, m.LogPath, timeout)
		return err
	})
	if err != nil {
		_ = m.cleanup()
		return nil, err
	}
	return m, nil
}

// Stop stops kube-controller-manager and removes its directory if
// NewControllerManager created it.
func (m *ControllerManager) Stop() error {
	var err error
	if m.proc != nil {
		err = m.proc.stop(10 * time.Second)
	}
	if cerr := m.cleanup(); err == nil {
		err = cerr
	}
	return err
}

func (m *ControllerManager) cleanup() error {
	if m.tempDir == "" {
		return nil
	}
	return os.RemoveAll(m.tempDir)
}
