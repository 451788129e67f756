package testenv

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// KWOKStages is the stage set KWOK plays: pod stages only (start, and stop
// once the preStop hook ran, at most for the grace period).
//
//go:embed kwok-stages.yaml
var KWOKStages []byte

// KWOKOptions configures NewKWOK.
type KWOKOptions struct {
	// ManageNodesWithAnnotation is the annotation selector (key=value) of
	// the nodes whose pods KWOK plays; required, so that KWOK never plays a
	// node it was not meant to.
	ManageNodesWithAnnotation string
	// Dir holds the stage file and the log. Default: a new temporary
	// directory removed by Stop.
	Dir string
	// Args are extra kwok flags (after testenv's, so they win).
	Args []string
	// StartTimeout bounds the wait for /healthz. Default 1 minute.
	StartTimeout time.Duration
}

// KWOK is a running kwok (sigs.k8s.io/kwok, the fake kubelet Karpenter's
// own end-to-end tests use) bound to a Kube.
type KWOK struct {
	// Port serves /healthz (and KWOK's kubelet-like API) on 127.0.0.1.
	Port int
	// LogPath is the process's log file.
	LogPath string

	proc    *process
	tempDir string
}

// NewKWOK runs kwok against k with KWOKStages: the pods bound to nodes
// carrying opts.ManageNodesWithAnnotation go Running and Ready, and a
// terminating pod is deleted when its preStop hook has run (a sleep hook
// its seconds, any other the whole grace period; no hook: at once). It plays
// no Node stage and holds no node Lease (--node-lease-duration-seconds=0):
// whoever registered a node keeps its status and heartbeat. Call Stop when done.
func NewKWOK(ctx context.Context, k *Kube, opts KWOKOptions) (*KWOK, error) {
	bin, err := FindBinary(BinKWOK)
	if err != nil {
		return nil, err
	}
	if k == nil || k.KubeconfigPath == "" {
		return nil, errors.New("kwok: Kube is not started (no kubeconfig)")
	}
	if opts.ManageNodesWithAnnotation == "" {
		return nil, errors.New("kwok: KWOKOptions.ManageNodesWithAnnotation is required")
	}
	kw := &KWOK{}
	dir, temp, err := workDir(opts.Dir, "testenv-kwok-")
	if err != nil {
		return nil, err
	}
	kw.tempDir = temp
	stages := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, KWOKStages, 0o600); err != nil {
		_ = kw.cleanup()
		return nil, err
	}
	kw.LogPath = filepath.Join(dir, "kwok.log")
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	if err := retryStart(ctx, func() error { return kw.start(ctx, bin, k, stages, opts, timeout) }); err != nil {
		_ = kw.cleanup()
		return nil, err
	}
	return kw, nil
}

func (kw *KWOK) start(ctx context.Context, bin string, k *Kube, stages string, opts KWOKOptions, timeout time.Duration) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + k.KubeconfigPath,
		// Only this file: never ~/.kwok/kwok.yaml or KWOK's own default stages.
		"--config=" + stages,
		"--manage-nodes-with-annotation-selector=" + opts.ManageNodesWithAnnotation,
		// No Lease of its own: the node's kubelet (the simulated Talos) keeps
		// the node alive, and stops doing so when its server powers off.
		"--node-lease-duration-seconds=0",
		// Room for thousands of pods (the default /24 runs out at 254).
		"--cidr=10.64.0.1/12",
		// Its kubelet-like server on a port of ours, never the default :10250.
		"--server-address=" + hostPort(port),
	}, opts.Args...)
	p, err := startProcess("kwok", bin, args, nil, kw.LogPath)
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, p, http.DefaultClient, fmt.Sprintf("http://%s/healthz", hostPort(port)), timeout); err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	kw.proc, kw.Port = p, port
	return nil
}

// Stop stops kwok and removes its directory if NewKWOK created it.
func (kw *KWOK) Stop() error {
	var err error
	if kw.proc != nil {
		err = kw.proc.stop(10 * time.Second)
	}
	if cerr := kw.cleanup(); err == nil {
		err = cerr
	}
	return err
}

func (kw *KWOK) cleanup() error {
	if kw.tempDir == "" {
		return nil
	}
	return os.RemoveAll(kw.tempDir)
}

// PodReady reports whether p runs and its Ready condition is True, as the
// pods KWOK starts on the world's nodes are.
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
