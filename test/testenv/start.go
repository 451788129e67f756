package testenv

import (
	"context"
	"os"
)

// startAttempts is how many times a component is started before its
// constructor gives up. Each start picks a free port before the process
// binds it, so another process may win the race; a fresh port usually
// wins the next.
const startAttempts = 3

// retryStart calls start until it succeeds, startAttempts calls have failed,
// or ctx is done; it returns the last call's error.
func retryStart(ctx context.Context, start func() error) error {
	for attempt := 1; ; attempt++ {
		err := start()
		if err == nil || attempt == startAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// workDir is the directory a component works in: dir when given, else a new
// temporary directory named after pattern, which is also returned as temp
// for the component's Stop to remove.
func workDir(dir, pattern string) (path, temp string, err error) {
	if dir != "" {
		return dir, "", nil
	}
	if temp, err = os.MkdirTemp("", pattern); err != nil {
		return "", "", err
	}
	return temp, temp, nil
}
