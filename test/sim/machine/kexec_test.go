package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"golang.org/x/crypto/ssh"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/diskimage"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/sim/scwsim"
)

// kexecRun runs em-imager kexec and returns its report, and whether the
// session ended without an exit status (the host went away) or its status.
func kexecRun(t *testing.T, c *ssh.Client, cmd string) (r *report.Report, dropped bool, code int) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	err = s.Run(cmd)
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case errors.As(err, &missing):
		dropped = true
	case errors.As(err, &ee):
		code = ee.ExitStatus()
	case err != nil:
		t.Fatalf("%s: %v", cmd, err)
	}
	if r, err = report.Parse(bytes.TrimSpace(stdout.Bytes())); err != nil {
		t.Fatalf("%s: report: %v\nstdout %s\nstderr %s", cmd, err, stdout.String(), stderr.String())
	}
	return r, dropped, code
}

// writeMetalISOImage has em-imager write a Talos-like metal-iso image to the
// machine's disk over c, and returns the disk.
func writeMetalISOImage(t *testing.T, c *ssh.Client) string {
	t.Helper()
	var buf bytes.Buffer
	if err := diskimage.WriteTalosLikeImage(&buf, 16<<20, diskimage.WithTalosVersion("v1.12.3"), diskimage.WithKernelArgs(diskimage.MetalISOKernelArgs)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	srv := imageServer(t, buf.Bytes())
	r, code, stderr := runReport(t, c, fmt.Sprintf("sudo -n ./em-imager write --image %s/metal-amd64.raw --sha256 %x --disk auto", srv.URL, sum))
	if code != 0 || !r.OK {
		t.Fatalf("write: %+v\n%s", r.Error, stderr)
	}
	disk := r.Disk.Path
	return disk
}

// writeImageAndConfig has em-imager write a metal-iso image and the node's
// config, and returns the disk and the config's sha256.
func writeImageAndConfig(t *testing.T, c *ssh.Client, name, providerID string) (string, string) {
	t.Helper()
	disk := writeMetalISOImage(t, c)
	r, code, stdout, stderr := runStdin(t, c, "sudo -n ./em-imager write-config --disk "+disk, workerConfig(t, name, providerID))
	if code != 0 || !r.OK || r.Config == nil {
		t.Fatalf("write-config: exit %d %s\n%s", code, stdout, stderr)
	}
	return disk, r.Config.SHA256
}

// A kexec jump from a server's rescue, through the EM API simulator: the
// SSH session drops without an exit status after the report, Talos runs
// from the disk after Delays.KexecBoot with no reboot in the ledger, the
// API still shows boot type rescue, and a firmware reboot then lands in
// rescue, as Scaleway's would.
func TestKexecJumpBootsTalosWithoutTheFirmware(t *testing.T) {
	ctx := context.Background()
	imager := emImager(t)
	kube := startKube(t)
	h := newHosts(t, Options{Kube: kube, DiskSizeDivisor: 20000})
	sim, bm, key, iamKey := simAPI(t, h, func(o *scwsim.Options) { o.Delays.KexecBoot = 300 * time.Millisecond })
	offerID, _ := sim.OfferID("fr-par-2", "EM-A610R-NVME", "hourly")
	srv, err := bm.CreateServer(&baremetal.CreateServerRequest{OfferID: offerID, Name: "kexec-1"})
	if err != nil {
		t.Fatal(err)
	}
	phase := func(want Phase) func() (bool, error) {
		return func() (bool, error) {
			s, err := h.Status(srv.ID)
			return err == nil && s.Phase == want, fmt.Errorf("phase %s, err %w", s.Phase, err)
		}
	}
	ready := func() (bool, error) {
		s, err := bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID})
		return err == nil && s.Status == baremetal.ServerStatusReady, err
	}
	waitFor(t, "delivered", ready)
	if _, err := bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeRescue, SSHKeyIDs: []string{iamKey.ID}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rescue", phase(PhaseRescue))
	m := scwsim.Machine{ID: srv.ID}
	if got, _ := bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID}); got != nil {
		m.IPv4 = got.IPs[0].Address.String()
	}
	c, err := sshClient(t, h, m, key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	upload(t, c, imager, "em-imager")
	providerID := "scaleway-em://fr-par-2/" + srv.ID
	disk, cfgSum := writeImageAndConfig(t, c, "kexec-1", providerID)

	jumped := time.Now()
	r, dropped, code := kexecRun(t, c, "sudo -n ./em-imager kexec --jump-delay 0s --disk "+disk+" --config-sha256 "+cfgSum)
	if !dropped || !r.OK || r.Kexec == nil || !r.Kexec.Jumping {
		t.Fatalf("kexec: dropped %v, exit %d, report %+v %+v", dropped, code, r.Error, r.Kexec)
	}
	// The session ended without an exit status as the jump began; the
	// machine then takes rescue's SSH server down, which the client sees a
	// moment later (the same race as a real connection reset).
	waitFor(t, "rescue's SSH gone after the jump", func() (bool, error) {
		s, err := c.NewSession()
		if err == nil {
			s.Close()
			return false, errors.New("a new session still opens")
		}
		return true, nil
	})
	waitFor(t, "Talos running after the jump", phase(PhaseRunning))
	st, _ := h.Status(srv.ID)
	if st.BootedBy != BootedByKexec || st.ConfigSource != ConfigFromMetalISO {
		t.Fatalf("after the jump: %+v", st)
	}
	if d := time.Since(jumped); d < 300*time.Millisecond {
		t.Fatalf("Talos ran %s after the jump, before Delays.KexecBoot", d)
	}
	waitFor(t, "node Ready", nodeReady(ctx, kube, "kexec-1"))
	got, err := bm.GetServer(&baremetal.GetServerRequest{ServerID: srv.ID})
	if err != nil || got.BootType != baremetal.ServerBootTypeRescue || got.Status != baremetal.ServerStatusReady {
		t.Fatalf("the API after a kexec jump: %v %s %s", err, got.BootType, got.Status)
	}
	reboots := 0
	for _, e := range sim.Ledger() {
		if e.Kind == scwsim.LedgerReboot && e.Server == srv.ID {
			reboots++
		}
	}
	if reboots != 1 {
		t.Fatalf("%d reboots in the ledger, want only the one into rescue", reboots)
	}

	// A firmware reboot boots what the API says: rescue.
	if err := sim.FirmwareReboot(srv.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rescue after a firmware reboot", phase(PhaseRescue))
	if st, _ := h.Status(srv.ID); st.BootedBy != BootedByFirmware {
		t.Fatalf("after the firmware reboot: %+v", st)
	}
	// A normal reboot through the API boots the disk's Talos again.
	if _, err := bm.RebootServer(&baremetal.RebootServerRequest{ServerID: srv.ID, BootType: baremetal.ServerBootTypeNormal}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Talos after a normal reboot", phase(PhaseRunning))
}

// The rescue kernel's answer is the machine's: every refusal leaves rescue
// up with the report's code, and a later kexec on an accepting machine
// works.
func TestKexecRefusalsPerMachine(t *testing.T) {
	imager := emImager(t)
	h := newHosts(t, Options{DiskSizeDivisor: 20000})
	for _, tc := range []struct{ refusal, code string }{
		{scwsim.KexecDisabled, report.CodeKexecDisabled},
		{scwsim.KexecLockdown, report.CodeKexecLockdown},
		{scwsim.KexecSecureBoot, report.CodeKexecSecureBoot},
		{scwsim.KexecUnsupported, report.CodeKexecUnsupported},
		{"EBUSY", report.CodeKexecBusy},
		{"EKEYREJECTED", report.CodeKexecSignatureRequired},
		{"ENOEXEC", report.CodeKexecFailed},
	} {
		t.Run(tc.refusal, func(t *testing.T) {
			m := newMachine(t, "EM-A610R-NVME")
			m.Kexec = tc.refusal
			c := bootRescue(t, h, m)
			upload(t, c, imager, "em-imager")
			disk, sum := writeImageAndConfig(t, c, m.Name, "scaleway-em://fr-par-2/"+m.ID)
			r, dropped, code := kexecRun(t, c, "sudo -n ./em-imager kexec --jump-delay 0s --disk "+disk+" --config-sha256 "+sum)
			if dropped || code != 8 || r.OK || r.Error == nil || r.Error.Code != tc.code || !report.KexecFallback(r.Error.Code) {
				t.Fatalf("dropped %v, exit %d, error %+v", dropped, code, r.Error)
			}
			if st, _ := h.Status(m.ID); st.Phase != PhaseRescue {
				t.Fatalf("after a refusal: %+v", st)
			}
			if _, code, _ := runReport(t, c, "sudo -n ./em-imager inspect"); code != 0 {
				t.Fatalf("rescue no longer runs commands after a refusal: exit %d", code)
			}
		})
	}
}
