package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/canary"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/e2e/harness"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/world"
)

// The rescue logins Scaleway's rescue systems are reported to have: the
// key-only "rescue" user with passwordless sudo, and a per-server em-XXXXX
// user whose sudo wants the password the API shows for the boot. The
// controller logs in as the API's user and gives sudo the API's password
// on stdin when sudo asks for one: a node joins in both.
func TestRescueLoginKeyOnlyAndPerServerPasswordBothInstall(t *testing.T) {
	for _, login := range []world.RescueLogin{world.RescueLoginKey, world.RescueLoginPassword} {
		t.Run(string(login), func(t *testing.T) {
			e := harness.Start(t, harness.Setup{World: world.Options{RescueLogin: login}})
			e.Run("app", 1, "3", "1Gi", false)
			e.WaitBound("app", 1, harness.WaitLong)
			users, hostLog := rescueLogins(t, e)
			wantUser := regexp.MustCompile(`^rescue$`)
			if login == world.RescueLoginPassword {
				wantUser = regexp.MustCompile(`^em-[a-z0-9]{5}$`)
			}
			for _, u := range users {
				if !wantUser.MatchString(u[1]) {
					t.Errorf("the controller logged into rescue as %q, want the API's user (%s)", u[1], wantUser)
				}
			}
			// The password goes to sudo -S in the per-server variant only.
			if got, want := strings.Contains(string(hostLog), "sudo -k -S"), login == world.RescueLoginPassword; got != want {
				t.Errorf("sudo -S on the rescue hosts' command lines: %v, want %v", got, want)
			}
			assertNoRescuePassword(t, e)
		})
	}
}

// sudo refuses the password the API shows: the install fails in imaging
// with RescueSudoRefused, and the server is handled as every install that
// cannot go on (released, or kept as a spare); the password shows nowhere.
func TestRescueLoginRefusedPasswordFailsTheInstall(t *testing.T) {
	e := harness.Start(t, harness.Setup{World: world.Options{RescueLogin: world.RescueLoginRefused}})
	e.Run("app", 1, "3", "1Gi", false)
	var failed corev1.Event
	e.Eventually("an install failed with "+install.ReasonRescueSudoRefused, harness.WaitLong, func() (bool, string) {
		l, err := e.W.Clientset.CoreV1().Events("").List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range l.Items {
			if ev.Reason == "InstallFailed" && strings.Contains(ev.Message, install.ReasonRescueSudoRefused) {
				failed = ev
				return true, ""
			}
		}
		return false, e.Summary()
	})
	t.Logf("InstallFailed: %s", failed.Message)
	for _, want := range []string{"phase imaging", "sudo refused the rescue password"} {
		if !strings.Contains(failed.Message, want) {
			t.Errorf("InstallFailed %q does not say %q", failed.Message, want)
		}
	}
	if !strings.Contains(failed.Message, "release") && !strings.Contains(failed.Message, "spare") {
		t.Errorf("InstallFailed %q says nothing of what becomes of the server", failed.Message)
	}
	// The server goes the way of any install that cannot go on: with the
	// world's hourly NodeClass and no spares asked for, it is deleted.
	m := regexp.MustCompile(`server ([0-9a-f-]{36})`).FindStringSubmatch(failed.Message)
	if m == nil {
		t.Fatalf("InstallFailed %q names no server", failed.Message)
	}
	e.Eventually("the failed server released", harness.WaitLong, func() (bool, string) {
		for _, s := range e.W.Sim.Servers() {
			if s.ID == m[1] {
				return false, s.Status + " " + strings.Join(s.Tags, ",")
			}
		}
		return true, ""
	})
	e.AssertNoDuplicateOrders()
	assertNoRescuePassword(t, e)
}

// assertNoRescuePassword looks for every rescue password the simulated API
// handed out in the controller's log, the Events, and what the rescue hosts
// sent back (em-imager's reports and progress) and ran (their log of
// command lines).
func assertNoRescuePassword(t *testing.T, e *harness.Env) {
	t.Helper()
	var secrets []canary.Secret
	for i, pw := range e.W.Sim.RescuePasswords() {
		secrets = append(secrets, canary.Secret{Name: fmt.Sprintf("rescue password %d", i), Value: pw})
	}
	if len(secrets) == 0 {
		t.Fatal("the simulated API handed out no rescue password")
	}
	var artefacts []canary.Artefact
	for name, path := range map[string]string{
		"controller log":       e.C.LogPath,
		"rescue hosts' log":    filepath.Join(e.W.Dir, "machines", "machines.log"),
		"simulated Scaleway's": filepath.Join(e.W.Dir, "scwsim.log"),
	} {
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) && name != "controller log" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		artefacts = append(artefacts, canary.Artefact{Name: name, Data: data})
	}
	evs, err := e.W.Clientset.CoreV1().Events("").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evJSON, _ := json.Marshal(evs)
	artefacts = append(artefacts, canary.Artefact{Name: "events", Data: evJSON})
	files, _ := filepath.Glob(filepath.Join(e.W.Dir, "machines", "transcripts", "*", "*"))
	if len(files) == 0 {
		t.Error("no rescue host transcript to scan")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		artefacts = append(artefacts, canary.Artefact{Name: "rescue output " + filepath.Base(f), Data: data})
	}
	hits, err := canary.Scan(secrets, artefacts)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		t.Errorf("rescue password leaked: %s", h)
	}
}

// The API shows a per-server user for the rescue boot, but the rescue system
// takes the controller's key only for "rescue": the controller's login as
// the API's user is refused, it logs in once more as RESCUE_SSH_USER
// ("rescue") and the node joins.
func TestRescueLoginAPIUserRefusedFallsBackToRescueSSHUser(t *testing.T) {
	e := harness.Start(t, harness.Setup{World: world.Options{RescueLogin: world.RescueLoginAPIUserRefused}})
	e.Run("app", 1, "3", "1Gi", false)
	e.WaitBound("app", 1, harness.WaitLong)
	users, hostLog := rescueLogins(t, e)
	for _, u := range users {
		if u[1] != "rescue" {
			t.Errorf("the controller logged into rescue as %q, want rescue (RESCUE_SSH_USER)", u[1])
		}
	}
	if !regexp.MustCompile(`msg="ssh login refused" .*?\buser=em-[a-z0-9]{5}\b`).Match(hostLog) {
		t.Error("the rescue hosts' log shows no refused login as the API's em-XXXXX user: the variant was not exercised")
	}
	assertNoRescuePassword(t, e)
}

// rescueLogins are the users the rescue hosts logged a login of (each
// match's [1]), and their log.
func rescueLogins(t *testing.T, e *harness.Env) ([][]string, []byte) {
	t.Helper()
	hostLog, err := os.ReadFile(filepath.Join(e.W.Dir, "machines", "machines.log"))
	if err != nil {
		t.Fatal(err)
	}
	users := regexp.MustCompile(`msg="ssh login" .*?\buser=(\S+)`).FindAllStringSubmatch(string(hostLog), -1)
	if len(users) == 0 {
		t.Fatal("no rescue login in the rescue hosts' log")
	}
	return users, hostLog
}
