// Package soak runs seeded chaos schedules against the real controller
// (bin/karpenter-scaleway-em, Karpenter core included) on the simulated world
// (test/world, "fast" delay profile) and checks the money invariants
// (test/invariants) over the simulated Scaleway's ledger.
//
// Generate turns a seed into a Schedule, about a minute of actions: pod waves
// and removals (Karpenter consolidates after them), NodeClass edits (spend
// limits, minimumLifetime, warm pool on and off), a second NodeClass whose
// installs always fail, hourly and monthly offers, API faults (5xx, bare
// 429, every shape of an answer lost after the commit), out of stock, quota,
// listing lag, stale listings and reads by ID (tag edits, status changes and
// deletions shown late), controller kills (SIGKILL, a new process after a
// pause) and leader changes: the world runs two replicas with leader
// election, and the leader is killed or frozen past its Lease, sometimes
// with the answers to its orders, tag edits or reboots held from it first.
// The schedule is a pure function of the seed: a PCG seeded by it, no clock.
//
// Run plays a schedule in a new world, lets the world settle (faults and
// limits lifted, both replicas up and one leading: every pod bound and
// every live server accounted for, or SettleTimeout), collects the facts
// the ledger cannot hold (each NodeClaim's life from the API server, the
// limits and minimumLifetime in force over time, the longest stretch
// without a leader, what the controller accounts for at the end) and runs
// the checker.
//
// What a replay cannot repeat: the actions fire at the same offsets of wall
// time, but the controller, Karpenter, the scheduler and the simulated
// machines run concurrently, so where an instant falls (a kill inside an
// order or just after it, which call a fault hits) depends on the machine's
// load; NodeClaim names, server IDs and the cluster ID are random. A
// violation seen once may take a few replays of its seed.
//
//	make soak SEEDS=1-100        # or SEEDS=7 to replay one
//	go test -run TestSoakFixedSeeds ./test/soak/   # the fixed seeds of make test
package soak
