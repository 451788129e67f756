package scwsim

import (
	"context"
	"sync"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
)

// BootMode is how a simulated server comes up after an install, start or reboot.
type BootMode string

const (
	// BootRescue: Scaleway's rescue system; SSH as Machine.RescueUser@<ipv4> with the keys given at reboot.
	BootRescue BootMode = "rescue"
	// BootNormal: boot from the server's disk (Talos, if em-imager wrote a verified image).
	BootNormal BootMode = "normal"
)

// Machine is the hardware and addressing of one simulated server, what the
// rest of the simulated world (rescue hosts, Talos API) needs to play it.
type Machine struct {
	ID        string
	Zone      string
	Name      string
	ProjectID string
	Offer     *baremetal.Offer // the offer it was ordered with (CPUs, disks, memory, bandwidth); read-only, shared
	// IPv4 is a unique loopback address (127.x.y.z) so that each server's SSH
	// and Talos API can listen on the standard ports side by side.
	IPv4        string
	IPv6        string // a /128 as Scaleway hands out, with its gateway
	IPv6Gateway string
	// MACs are the permanent hardware MACs of the NICs, uplink first.
	MACs []string
	// Tags are the server's tags when the Host call was queued.
	Tags []string
	// RescueUser and RescuePassword are the rescue_server the API shows
	// for the boot (rescue boots only): the login and sudo password.
	RescueUser, RescuePassword string
	// Kexec is what the rescue kernel answers em-imager kexec (rescue
	// boots only): "" accepts, else an Options.Kexec refusal.
	Kexec string
	// KexecBoot is how long the Talos a kexec jump loaded takes to run
	// (Delays.KexecBoot, scaled and jittered).
	KexecBoot time.Duration
}

// Host plays the machine side of a simulated server. The EM API simulator
// calls it at the edges of the server's state machine; implementations must
// return quickly (start listeners in the background).
type Host interface {
	// Boot is called when a boot completes: an install/delivery (mode
	// normal, empty disk), a reboot or a start. sshPublicKeys are the
	// authorized_keys lines of the IAM keys named in the reboot (rescue only).
	Boot(ctx context.Context, m Machine, mode BootMode, sshPublicKeys []string) error
	// PowerOff is called when the machine stops running its OS: at the start
	// of a reboot or stop, and on delete.
	PowerOff(serverID string)
	// Delete is called once the server is gone from the API: release its disks.
	Delete(serverID string)
}

// noHost is the Host used when Options.Host is nil.
type noHost struct{}

func (noHost) Boot(context.Context, Machine, BootMode, []string) error { return nil }
func (noHost) PowerOff(string)                                         {}
func (noHost) Delete(string)                                           {}

// hostQueue runs one server's Host calls one at a time, in the order the
// state machine queued them, outside the simulator's lock (a Host may call
// back into the Sim).
type hostQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []func()
	closed bool
}

func newHostQueue(wg *sync.WaitGroup) *hostQueue {
	q := &hostQueue{}
	q.cond = sync.NewCond(&q.mu)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			q.mu.Lock()
			for len(q.items) == 0 && !q.closed {
				q.cond.Wait()
			}
			if len(q.items) == 0 {
				q.mu.Unlock()
				return
			}
			fn := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			fn()
		}
	}()
	return q
}

func (q *hostQueue) push(fn func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.items = append(q.items, fn)
	q.cond.Signal()
}

// close lets queued calls run, then ends the worker.
func (q *hostQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Signal()
}
