package install

import (
	"context"

	"github.com/go-logr/logr"
)

// scope is what one attempt of a phase works with (cluster-api's machine
// scope): the two contexts, the logger, the job and what the run learnt so
// far, in one value instead of five parameters. The server is not in it:
// each step returns the state the next one acts on.
type scope struct {
	// run ends only when the install stops (the controller shuts down or
	// the run is cancelled). Writes that record progress on the server (the
	// phase, the host key pin, the image tags) use it, so that the phase's
	// deadline passing mid-write does not lose the record; and a failure is
	// told to be the phase's timeout, not a stop, by run.Err() being nil.
	run context.Context
	// phase is run bounded by the phase's deadline (its start on the phase
	// tag plus its timeout, so it survives restarts): every wait, poll,
	// SSH session, em-imager run and job callback uses it. Nil in the run's
	// own scope (Run's, between attempts); runPhase sets it per attempt.
	phase context.Context
	// log names the server (and, for a pre-imaging, says so).
	log logr.Logger
	job *Job
	// state lives as long as the run, across its phases and attempts.
	state *runState
}

// runState is what one run (Run or PreImage) learns in a phase and a later
// phase of the same run uses. A restart starts with none of it, and each
// use says what it does then.
type runState struct {
	// disks is what this run's em-imager found (EncodeDisks).
	disks string
	// foldImageTags: writeImage leaves the image, disk and uplink tags to
	// the booting phase's write (imageTags) instead of writing them.
	foldImageTags bool
	imageTags     func([]string) []string
	// kexecPending: this process wrote the jump's record with phase
	// booting and has not run the jump yet (a record found without it may
	// stand for a jump an earlier process made).
	kexecPending bool
	// configSHA is the sha256 of the config this run's write-config put on
	// the disk ("" after a restart): kexec checks the disk still holds it.
	configSHA string
}
