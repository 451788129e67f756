// Command gen-snapshot writes the offer snapshot embedded in the catalog package.
//
// From the recorded API exchanges (the default, deterministic):
//
//	go run ./catalog/cmd/gen-snapshot
//
// From the real API, with credentials taken from the standard SCW_ACCESS_KEY / SCW_SECRET_KEY (and optional
// SCW_API_URL) environment variables:
//
//	go run ./catalog/cmd/gen-snapshot -live
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/catalog/snapshot"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gen-snapshot:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gen-snapshot", flag.ContinueOnError)
	recordings := fs.String("recordings", "test/fixtures/scaleway/baremetal-api-recordings.json", "recorded API exchanges to read (ignored with -live)")
	out := fs.String("out", "catalog/snapshot/"+snapshot.File, "snapshot file to write")
	live := fs.Bool("live", false, "list offers from the real API (credentials from SCW_* environment variables)")
	zones := fs.String("zones", joinZones(snapshot.Zones), "comma-separated zones to list with -live")
	deriveFrom := fs.String("derive-from", string(scw.ZoneFrPar2), "zone whose real offers seed the zones without data")
	derive := fs.Bool("derive-missing", false, "with -live, derive a zone the API refuses instead of failing")
	timeout := fs.Duration("timeout", 2*time.Minute, "overall API timeout with -live")
	if err := fs.Parse(args); err != nil {
		return err
	}
	from, err := scw.ParseZone(*deriveFrom)
	if err != nil {
		return fmt.Errorf("flag -derive-from: %w", err)
	}
	var s *snapshot.Snapshot
	if *live {
		s, err = fromAPI(*zones, from, *derive, *timeout)
	} else {
		var b []byte
		if b, err = os.ReadFile(*recordings); err != nil {
			return fmt.Errorf("flag -recordings: %w", err)
		}
		s, err = snapshot.FromRecordings(b, from)
	}
	if err != nil {
		return err
	}
	b, err := s.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return fmt.Errorf("flag -out: %w", err)
	}
	fmt.Fprintf(os.Stderr, "gen-snapshot: wrote %s (%d zones, %d bytes)\n", *out, len(s.Zones), len(b))
	return nil
}

func fromAPI(zoneList string, from scw.Zone, derive bool, timeout time.Duration) (*snapshot.Snapshot, error) {
	var zones []scw.Zone
	for _, z := range strings.Split(zoneList, ",") {
		zone, err := scw.ParseZone(strings.TrimSpace(z))
		if err != nil {
			return nil, fmt.Errorf("flag -zones: %w", err)
		}
		zones = append(zones, zone)
	}
	// The SDK reads SCW_ACCESS_KEY, SCW_SECRET_KEY, SCW_API_URL... itself; the keys never pass through flags.
	client, err := scw.NewClient(scw.WithEnv(), scw.WithUserAgent("karpenter-scaleway-em/gen-snapshot"))
	if err != nil {
		return nil, fmt.Errorf("scaleway client from SCW_* environment: %w", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	defer cancelT()
	return snapshot.FromAPI(ctx, baremetal.NewAPI(client), zones, from, derive, time.Now())
}

func joinZones(zs []scw.Zone) string {
	s := make([]string, len(zs))
	for i, z := range zs {
		s[i] = string(z)
	}
	return strings.Join(s, ",")
}
