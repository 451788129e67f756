package scwsim

import (
	"strings"
	"testing"
	"time"
)

func TestProfiles(t *testing.T) {
	var prev time.Duration
	for _, name := range []string{ProfileTest, ProfileFast, ProfileRealistic} {
		o, err := Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o.Delays.Delivery <= prev {
			t.Fatalf("%s delivery %v is not slower than the previous profile's %v", name, o.Delays.Delivery, prev)
		}
		prev = o.Delays.Delivery
	}
	r, _ := Profile(ProfileRealistic)
	if r.Delays.Delivery < 4*time.Minute || r.Delays.Delivery > 5*time.Minute {
		t.Fatalf("realistic delivery %v, want 4-5 min like Scaleway", r.Delays.Delivery)
	}
	if reboot := r.Delays.RebootStop + r.Delays.RebootStart; reboot < 2*time.Minute || reboot > 3*time.Minute {
		t.Fatalf("realistic reboot %v, want 2-3 min", reboot)
	}
	if _, err := Profile("slow"); err == nil || !strings.Contains(err.Error(), "realistic") {
		t.Fatalf("unknown profile: %v", err)
	}
}

func TestOptionsValidateNamesTheField(t *testing.T) {
	for field, o := range map[string]Options{
		"Options.Zones":             {Zones: []string{"paris"}},
		"Options.Scale":             {Scale: -1},
		"Options.Delays.Delivery":   {Delays: Delays{Delivery: -time.Second}},
		"Options.ProjectID":         {ProjectID: "p"},
		"Options.AllowedProjects":   {AllowedProjects: []string{"x"}},
		"Options.Stock":             {Stock: map[string]int{"EM-NOPE": 1}},
		`Options.Stock["paris/`:     {Stock: map[string]int{"paris/EM-B112X-SSD": 1}},
		"Options.Quotas":            {Quotas: map[string]int{"EM-B112X-SSD": -1}},
		"Options.Stockout":          {Stockout: "maybe"},
		"Options.NICs":              {NICs: -2},
		"Options.DefaultPageSize":   {DefaultPageSize: 200, MaxPageSize: 100},
		"Options.PrivateNetworkIDs": {PrivateNetworkIDs: []string{"pn"}},
		"Options.OrganizationID":    {OrganizationID: "o"},
		"Options.Jitter":            {Jitter: -0.1},
		`Options.Quotas["EM-NOPE"]`: {Quotas: map[string]int{"EM-NOPE": 1}},
		`Options.Quotas["p/`:        {Quotas: map[string]int{"p/EM-B112X-SSD": 1}},
		"Options.ListLag":           {ListLag: -time.Second},
		"Options.StaleLag":          {StaleLag: -time.Second},
		"Options.RateLimit":         {RateBurst: -1},
		"Options.Kexec":             {Kexec: map[string]string{"EM-NOPE": KexecAccepted}},
		// Two bad fields: the one checked first is named, zones before stock.
		"Options.Zones: ": {Zones: []string{"paris"}, Stock: map[string]int{"EM-NOPE": 1}},
	} {
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: got %v", field, err)
		}
	}
	if err := (Options{Stock: map[string]int{"fr-par-2/EM-B112X-SSD": 3, "EM-A410X-SSD": 0}}).Validate(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("New accepted invalid options")
		}
	}()
	New(Options{Scale: -1})
}

func TestScaleStretchesDelays(t *testing.T) {
	o := Options{Scale: 0.5}.withDefaults()
	if got := o.scaled(time.Minute); got != 30*time.Second {
		t.Fatalf("scaled: %v", got)
	}
	if d := (Options{}).withDefaults(); d.Scale != 1 || d.SecretKey != DefaultSecretKey || len(d.Zones) != 3 {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestJitterStaysWithinBounds(t *testing.T) {
	opts, _ := Profile(ProfileRealistic)
	if opts.Jitter == 0 {
		t.Fatal("realistic profile has no jitter")
	}
	s := New(opts)
	defer s.Close()
	d := opts.Delays.Delivery
	lo, hi := time.Duration(float64(d)*(1-opts.Jitter)), time.Duration(float64(d)*(1+opts.Jitter))
	seen := map[time.Duration]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < 1000; i++ {
		got := s.delay(d)
		if got < lo || got > hi {
			t.Fatalf("delay %v outside [%v, %v]", got, lo, hi)
		}
		seen[got] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct delays: no jitter", len(seen))
	}
	if err := (Options{Jitter: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "Options.Jitter") {
		t.Fatalf("Jitter 1: %v", err)
	}
}

// Options.Kexec: per offer, "*" for the others, accepted by default; a
// Talos boot alone is far shorter than the firmware's reboot.
func TestKexecOptionPerOffer(t *testing.T) {
	o := Options{Kexec: map[string]string{"EM-A610R-NVME": "EBUSY", "EM-B112X-SSD": KexecAccepted, "*": KexecDisabled}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	for offer, want := range map[string]string{"EM-A610R-NVME": "EBUSY", "EM-B112X-SSD": "", "EM-A410X-SSD": KexecDisabled} {
		if got := o.KexecFor(offer); got != want {
			t.Errorf("%s: %q, want %q", offer, got, want)
		}
	}
	if got := (Options{}).KexecFor("EM-A610R-NVME"); got != "" {
		t.Errorf("no option: %q, want accepted", got)
	}
	for _, bad := range []map[string]string{{"EM-NOPE": ""}, {"*": "maybe"}} {
		if err := (Options{Kexec: bad}).Validate(); err == nil || !strings.Contains(err.Error(), "Options.Kexec") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	r, _ := Profile(ProfileRealistic)
	if r.Delays.KexecBoot <= 0 || r.Delays.KexecBoot*4 > r.Delays.RebootStop+r.Delays.RebootStart {
		t.Fatalf("realistic kexec boot %v against a reboot of %v", r.Delays.KexecBoot, r.Delays.RebootStop+r.Delays.RebootStart)
	}
}
