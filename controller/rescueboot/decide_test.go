package rescueboot

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestKexecRescueBootRepairDecide(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	p := Policy{NotReadyFor: 2 * time.Minute, MinInterval: 30 * time.Minute}
	// A kexec-booted node whose firmware rebooted it into rescue: its Node
	// Unknown for 5 minutes.
	down := Observation{KexecBooted: true, Joined: true, ServerReady: true, NodeFound: true,
		NodeReady: corev1.ConditionUnknown, NotReadySince: now.Add(-5 * time.Minute)}
	with := func(f func(o *Observation)) Observation {
		o := down
		f(&o)
		return o
	}
	for _, tc := range []struct {
		name string
		o    Observation
		want Action
		at   time.Time
	}{
		{"not Ready long enough while booting into rescue", down, Repair, time.Time{}},
		{"not Ready exactly the wait", with(func(o *Observation) { o.NotReadySince = now.Add(-2 * time.Minute) }), Repair, time.Time{}},
		{"NotReady reported by the kubelet (Talos runs)", with(func(o *Observation) { o.NodeReady = corev1.ConditionFalse }), None, time.Time{}},
		{"no Ready condition yet", with(func(o *Observation) { o.NodeReady = "" }), None, time.Time{}},
		{"repaired long ago", with(func(o *Observation) { o.LastRepair = now.Add(-31 * time.Minute) }), Repair, time.Time{}},
		{"not Ready for less than the wait", with(func(o *Observation) { o.NotReadySince = now.Add(-time.Minute) }), Wait, now.Add(time.Minute)},
		{"repaired within the interval", with(func(o *Observation) { o.LastRepair = now.Add(-10 * time.Minute) }), Wait, now.Add(20 * time.Minute)},
		{"Node Ready", with(func(o *Observation) { o.NodeReady = corev1.ConditionTrue }), None, time.Time{}},
		{"boot type normal or no kexec record", with(func(o *Observation) { o.KexecBooted = false }), None, time.Time{}},
		{"a spare or an install still running", with(func(o *Observation) { o.Joined = false }), None, time.Time{}},
		{"server mid-reboot", with(func(o *Observation) { o.ServerReady = false }), None, time.Time{}},
		{"no Node", with(func(o *Observation) { o.NodeFound = false }), None, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.o, p, now)
			if d.Action != tc.want || d.Why == "" || !d.At.Equal(tc.at) {
				t.Fatalf("Decide = %+v, want %s at %v", d, tc.want, tc.at)
			}
		})
	}
}
