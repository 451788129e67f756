package rescuekey

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	iamapi "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	simrescue "github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

const (
	simAccessKey = "SCWABCDEFGHIJKLMNOPQ"
	simSecretKey = "11111111-1111-4111-8111-111111111111"
	simProject   = "00000000-0000-0000-0000-000000000000"
)

// rescueHosts plays the machines' rescue systems: a real SSH server per
// rescue boot that lets in the key lines Scaleway hands over at the reboot.
type rescueHosts struct {
	dir   string
	mu    sync.Mutex
	up    map[string]*simrescue.Server
	boots chan string // server ID of each rescue boot
}

func (h *rescueHosts) Boot(_ context.Context, m scwsim.Machine, mode scwsim.BootMode, keys []string) error {
	if mode != scwsim.BootRescue {
		return nil
	}
	home := filepath.Join(h.dir, m.ID)
	srv, err := simrescue.Start(simrescue.Options{Addr: m.IPv4 + ":0", Home: home, BinDir: home + "-bin", AuthorizedKeys: keys})
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.up[m.ID] = srv
	h.mu.Unlock()
	h.boots <- m.ID
	return nil
}

func (h *rescueHosts) PowerOff(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.up[id]; s != nil {
		s.Close()
		delete(h.up, id)
	}
}

func (h *rescueHosts) Delete(string) {}

func (h *rescueHosts) addr(t *testing.T, id string) (string, int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	host, port, _ := net.SplitHostPort(h.up[id].Addr())
	p, _ := strconv.Atoi(port)
	return host, p
}

type onDemandEnv struct {
	api   *scaleway.Client
	sim   *scwsim.Sim
	hosts *rescueHosts
	store *Store
	srv   *baremetal.Server
}

func startOnDemand(t *testing.T) *onDemandEnv {
	t.Helper()
	o, err := scwsim.Profile(scwsim.ProfileTest)
	if err != nil {
		t.Fatal(err)
	}
	hosts := &rescueHosts{dir: t.TempDir(), up: map[string]*simrescue.Server{}, boots: make(chan string, 4)}
	o.SecretKey, o.ProjectID, o.Host = simSecretKey, simProject, hosts
	sim := scwsim.New(o)
	url, err := sim.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	t.Cleanup(func() {
		for id := range hosts.up {
			hosts.PowerOff(id)
		}
	})
	api, err := scaleway.New(scaleway.Config{AccessKey: simAccessKey, SecretKey: simSecretKey, ProjectID: simProject,
		APIURL: url, DefaultZone: scw.ZoneFrPar2, RequestTimeout: 10 * time.Second, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := &onDemandEnv{api: api, sim: sim, hosts: hosts,
		store: &Store{Kube: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), Namespace: "karpenter", Name: "rescue",
			KeyName: "karpenter-scaleway-em-test", IAM: api}}
	ctx := t.Context()
	offers, err := api.ListOffers(ctx, scw.ZoneFrPar2, baremetal.OfferSubscriptionPeriodHourly)
	if err != nil {
		t.Fatal(err)
	}
	var offer string
	for _, of := range offers {
		if of.Enable && of.Stock == baremetal.OfferStockAvailable {
			offer = of.ID
			break
		}
	}
	tag := scaleway.Tag(scaleway.TagNodeClaim, "rescuekey-test")
	e.srv, _, err = api.CreateServer(ctx, scaleway.CreateServerRequest{Zone: scw.ZoneFrPar2, OfferID: offer, Name: "rescuekey-test",
		Tags: []string{tag}, IdempotencyTag: tag})
	if err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, baremetal.ServerBootTypeNormal)
	return e
}

func (e *onDemandEnv) waitReady(t *testing.T, boot baremetal.ServerBootType) {
	t.Helper()
	for {
		srv, err := e.api.GetServer(t.Context(), e.srv.Zone, e.srv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if srv.Status == baremetal.ServerStatusReady && srv.BootType == boot {
			e.srv = srv
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rebootRescue reboots into rescue with ids and returns a dialer for it.
func (e *onDemandEnv) rebootRescue(t *testing.T, ids []string) (*rescue.Dialer, string, error) {
	t.Helper()
	if _, err := e.api.RebootServer(t.Context(), e.srv.Zone, e.srv.ID, baremetal.ServerBootTypeRescue, ids); err != nil {
		return nil, "", err
	}
	if id := <-e.hosts.boots; id != e.srv.ID {
		t.Fatalf("rescue boot of %s", id)
	}
	e.waitReady(t, baremetal.ServerBootTypeRescue)
	host, port := e.hosts.addr(t, e.srv.ID)
	return &rescue.Dialer{User: "rescue", Port: port, Timeout: 5 * time.Second, Signers: func() ([]ssh.Signer, error) {
		s, err := e.store.Signer(context.Background())
		return []ssh.Signer{s}, err
	}}, host, nil
}

// iamKeys lists the project's IAM SSH keys with the SDK, as an operator would see them.
func (e *onDemandEnv) iamKeys(t *testing.T) []*iamapi.SSHKey {
	t.Helper()
	resp, err := iamapi.NewAPI(e.api.SDK()).ListSSHKeys(&iamapi.ListSSHKeysRequest{}, scw.WithAllPages(), scw.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	return resp.SSHKeys
}

func never(context.Context) (bool, error) { return false, nil }

// The key is in IAM only from just before a rescue reboot until that rescue
// system let it in: the simulated API reads the key lines at the reboot, and
// the rescue system keeps them for its boot, so removing the IAM key after the
// first login leaves the install working. A reboot naming a removed key fails,
// which is why Acquire comes before every reboot.
func TestKeyIsRegisteredOnlyWhileARescueBootNeedsIt(t *testing.T) {
	e := startOnDemand(t)
	ctx := t.Context()
	if n := len(e.iamKeys(t)); n != 0 {
		t.Fatalf("%d IAM keys before any install", n)
	}

	ids, err := e.store.Acquire(ctx, e.srv.ID)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	keys := e.iamKeys(t)
	if len(keys) != 1 || keys[0].ID != ids[0] || keys[0].Name != e.store.KeyName {
		t.Fatalf("IAM keys after Acquire: %+v (ids %v)", keys, ids)
	}
	// Held: nothing removes it, whatever the servers say.
	if removed, err := e.store.UnregisterUnused(ctx, never); err != nil || removed {
		t.Fatalf("UnregisterUnused while held = %v, %v", removed, err)
	}

	d, host, err := e.rebootRescue(t, ids)
	if err != nil {
		t.Fatalf("reboot into rescue: %v", err)
	}
	sess, err := d.WaitDial(ctx, host, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("rescue SSH with the registered key: %v", err)
	}
	defer sess.Close()

	// The rescue system let the key in: release and remove it from IAM.
	e.store.Release(e.srv.ID)
	if e.store.Holders() != 0 {
		t.Fatalf("%d holders after Release", e.store.Holders())
	}
	if removed, err := e.store.UnregisterUnused(ctx, never); err != nil || !removed {
		t.Fatalf("UnregisterUnused = %v, %v", removed, err)
	}
	if keys := e.iamKeys(t); len(keys) != 0 {
		t.Fatalf("IAM keys after UnregisterUnused: %+v", keys)
	}
	// The install goes on: the open session and new ones (a restart mid-imaging) still work.
	if code, err := sess.Run(ctx, "true", nil, nil); err != nil || code != 0 {
		t.Fatalf("open rescue session after the key left IAM: %d %v", code, err)
	}
	again, err := d.Dial(ctx, host)
	if err != nil {
		t.Fatalf("new rescue session after the key left IAM: %v", err)
	}
	again.Close()

	// A reboot with the removed key's ID is refused: each reboot must Acquire.
	if _, _, err := e.rebootRescue(t, ids); !scaleway.IsNotFound(err) {
		t.Fatalf("reboot with a removed key = %v, want not found", err)
	}
	ids2, err := e.store.Acquire(ctx, e.srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	d, host, err = e.rebootRescue(t, ids2)
	if err != nil {
		t.Fatalf("reboot after a new Acquire: %v", err)
	}
	s2, err := d.WaitDial(ctx, host, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("rescue SSH after re-registering: %v", err)
	}
	s2.Close()
	e.store.Release(e.srv.ID)

	// A server still waiting for its rescue boot (another leader's install)
	// keeps the key; so does an error while finding out.
	busy := func(context.Context) (bool, error) { return true, nil }
	if removed, err := e.store.UnregisterUnused(ctx, busy); err != nil || removed {
		t.Fatalf("UnregisterUnused with a server in rescue = %v, %v", removed, err)
	}
	broken := func(context.Context) (bool, error) { return false, errors.New("list failed") }
	if removed, err := e.store.UnregisterUnused(ctx, broken); err == nil || removed {
		t.Fatalf("UnregisterUnused when the servers cannot be listed = %v, %v", removed, err)
	}
	if n := len(e.iamKeys(t)); n != 1 {
		t.Fatalf("%d IAM keys, want the one still needed", n)
	}
	if removed, err := e.store.UnregisterUnused(ctx, never); err != nil || !removed {
		t.Fatalf("final UnregisterUnused = %v, %v", removed, err)
	}
}

// The same public key registered by a person under another name is reused
// for the reboot but never removed by the controller.
func TestKeyRegisteredBySomeoneElseIsNotRemoved(t *testing.T) {
	e := startOnDemand(t)
	ctx := t.Context()
	signer, err := e.store.Signer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := iamapi.NewAPI(e.api.SDK()).CreateSSHKey(&iamapi.CreateSSHKeyRequest{Name: "ops-laptop",
		PublicKey: string(ssh.MarshalAuthorizedKey(signer.PublicKey())), ProjectID: simProject}, scw.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := e.store.Acquire(ctx, "server")
	if err != nil || len(ids) != 1 || ids[0] != theirs.ID {
		t.Fatalf("Acquire = %v, %v; want the existing key %s", ids, err, theirs.ID)
	}
	e.store.Release("server")
	if removed, err := e.store.UnregisterUnused(ctx, never); err != nil || removed {
		t.Fatalf("UnregisterUnused removed someone else's key: %v, %v", removed, err)
	}
	if keys := e.iamKeys(t); len(keys) != 1 || keys[0].ID != theirs.ID {
		t.Fatalf("IAM keys %+v", keys)
	}
}
