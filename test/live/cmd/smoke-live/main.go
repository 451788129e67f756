// Command smoke-live checks a real Scaleway account for the API shapes the
// provider relies on, ordering nothing (only GET requests leave it):
//
//	SCW_ACCESS_KEY=... SCW_SECRET_KEY=... SCW_DEFAULT_PROJECT_ID=... make smoke-live
//	go run ./test/live/cmd/smoke-live -cluster prod -zones fr-par-1,fr-par-2
//	SMOKE_RESCUE_SERVER=fr-par-2/<server-id> make smoke-live   # also probes that server's rescue (kexec)
//
// Credentials come from the environment only (scaleway.ConfigFromEnv).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/crypto/ssh"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/test/live"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "smoke-live:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("smoke-live", flag.ContinueOnError)
	zones := fs.String("zones", joinZones(snapshot.Zones), "comma-separated Elastic Metal zones to check")
	cluster := fs.String("cluster", os.Getenv("CLUSTER_NAME"), "the provider's cluster name (servers tagged karpenter.sh/managed-by=<name>); default $CLUSTER_NAME")
	timeout := fs.Duration("timeout", 5*time.Minute, "overall time limit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var zs []scw.Zone
	for _, z := range strings.Split(*zones, ",") {
		zone, err := scw.ParseZone(strings.TrimSpace(z))
		if err != nil {
			return fmt.Errorf("flag -zones: %w", err)
		}
		zs = append(zs, zone)
	}
	cfg, err := scaleway.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	client, err := scaleway.New(cfg, scaleway.WithTransport(live.ReadOnly(http.DefaultTransport.(*http.Transport).Clone())))
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	fmt.Printf("checking %s (project %s) in %s, read-only\n", cfg.APIURL, cfg.ProjectID, *zones)
	r := live.Run(ctx, client, live.Options{Zones: zs, Cluster: *cluster})
	if target := os.Getenv(live.RescueServerEnv); target != "" {
		if err := probeRescue(ctx, client, target, r); err != nil {
			return err
		}
	}
	r.Print(os.Stdout)
	if r.Failed() {
		return fmt.Errorf("some shapes the provider relies on are not what it expects (FAIL lines above)")
	}
	return nil
}

// probeRescue is the optional step: the server named <zone>/<id> in
// $SMOKE_RESCUE_SERVER, read through the (read-only) API, gets em-imager
// over SFTP and runs inspect, which writes nothing.
func probeRescue(ctx context.Context, client *scaleway.Client, target string, r *live.Report) error {
	zoneName, id, ok := strings.Cut(target, "/")
	zone, err := scw.ParseZone(zoneName)
	if !ok || err != nil {
		return fmt.Errorf("%s=%q: want <zone>/<server-id>", live.RescueServerEnv, target)
	}
	srv, err := client.GetServer(ctx, zone, id)
	if err != nil {
		return fmt.Errorf("%s: %w", live.RescueServerEnv, err)
	}
	signer, err := live.RescueSigner()
	if err != nil {
		return err
	}
	path := os.Getenv(live.RescueImagerEnv)
	if path == "" {
		path = "bin/em-imager"
	}
	binary, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s (make build writes bin/em-imager): %w", live.RescueImagerEnv, err)
	}
	d := &rescue.Dialer{User: "rescue", Port: 22, Timeout: 30 * time.Second,
		Signers: func() ([]ssh.Signer, error) { return []ssh.Signer{signer}, nil }}
	live.ProbeRescue(ctx, d, srv, binary, r)
	return nil
}

func joinZones(zs []scw.Zone) string {
	s := make([]string, len(zs))
	for i, z := range zs {
		s[i] = string(z)
	}
	return strings.Join(s, ",")
}
