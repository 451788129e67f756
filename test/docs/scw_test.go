package docs

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

// TestMain lets this test binary play `scw` (Scaleway's CLI) and `helm`,
// which are not installed here: the docs' blocks run with a directory on
// PATH where "scw" and "helm" are links to this binary (standInOnPath), and
// a process started under either name runs scwMain or helmMain instead of
// the tests.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "scw":
		os.Exit(scwMain(os.Args[1:], os.Stdout, os.Stderr))
	case "helm":
		os.Exit(helmMain(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// standInOnPath puts a command name (scw, helm) that is this test binary
// into dir.
func standInOnPath(t *testing.T, dir, name string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// wrapOnPath writes an executable script dir/name that runs the real name
// found on PATH: script is a format whose first verb is that program's path.
func wrapOnPath(t *testing.T, dir, name, script string, args ...any) {
	t.Helper()
	real, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH (make deps installs it): %v", name, err)
	}
	body := fmt.Sprintf(script, append([]any{real}, args...)...)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// scwMain maps the scw commands the docs use to the Scaleway SDK calls
// the CLI makes, against the API in SCW_API_URL (the simulator), with the
// SDK's environment (SCW_ACCESS_KEY, SCW_SECRET_KEY,
// SCW_DEFAULT_PROJECT_ID):
//
//	scw baremetal server reboot ID zone=Z boot-type=T [ssh-key-ids.N=K]  baremetal.RebootServer
//	scw baremetal server wait ID zone=Z                                 baremetal.WaitForServer
//	scw baremetal server get ID zone=Z -o json                          baremetal.GetServer, printed as JSON
//
// with the CLI's argument forms (the server ID first, key=value after it,
// "-o json" for JSON output, which for a server is the API's own JSON as
// the SDK's types carry it). Any other command fails, naming itself, so a
// new scw command in the docs needs a mapping here before its block passes.
func scwMain(args []string, stdout, stderr io.Writer) int {
	if err := runSCW(args, stdout); err != nil {
		fmt.Fprintf(stderr, "scw (test stand-in, test/docs/scw_test.go): %v\n", err)
		return 1
	}
	return 0
}

// scwArgs are one command's arguments: positional ones and key=value ones.
type scwArgs struct {
	pos  []string
	kv   map[string]string
	json bool
}

func parseSCW(args []string) scwArgs {
	a := scwArgs{kv: map[string]string{}}
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-o" && i+1 < len(args):
			a.json = args[i+1] == "json"
			i++
		case strings.Contains(args[i], "="):
			k, v, _ := strings.Cut(args[i], "=")
			a.kv[k] = v
		default:
			a.pos = append(a.pos, args[i])
		}
	}
	return a
}

func runSCW(args []string, stdout io.Writer) error {
	a := parseSCW(args)
	if len(a.pos) != 4 || a.pos[0] != "baremetal" || a.pos[1] != "server" {
		return fmt.Errorf("%q is not mapped to an SDK call", strings.Join(args, " "))
	}
	client, err := scw.NewClient(scw.WithEnv())
	if err != nil {
		return err
	}
	api := baremetal.NewAPI(client)
	zone, err := scw.ParseZone(a.kv["zone"])
	if err != nil {
		return fmt.Errorf("zone=%q: %w", a.kv["zone"], err)
	}
	id := a.pos[3]
	switch a.pos[2] {
	case "reboot":
		req := &baremetal.RebootServerRequest{Zone: zone, ServerID: id, BootType: baremetal.ServerBootType(a.kv["boot-type"])}
		for i := 0; ; i++ {
			k, ok := a.kv[fmt.Sprintf("ssh-key-ids.%d", i)]
			if !ok {
				break
			}
			req.SSHKeyIDs = append(req.SSHKeyIDs, k)
		}
		srv, err := api.RebootServer(req)
		return print(stdout, srv, err, a.json)
	case "wait":
		timeout := 10 * time.Minute
		srv, err := api.WaitForServer(&baremetal.WaitForServerRequest{Zone: zone, ServerID: id, Timeout: &timeout})
		return print(stdout, srv, err, a.json)
	case "get":
		srv, err := api.GetServer(&baremetal.GetServerRequest{Zone: zone, ServerID: id})
		return print(stdout, srv, err, a.json)
	}
	return fmt.Errorf("%q is not mapped to an SDK call", strings.Join(args, " "))
}

// print writes a server as scw does: JSON with -o json, else a line.
func print(w io.Writer, srv *baremetal.Server, err error, asJSON bool) error {
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(w).Encode(srv)
	}
	_, err = fmt.Fprintf(w, "ID %s\nStatus %s\nBootType %s\n", srv.ID, srv.Status, srv.BootType)
	return err
}
