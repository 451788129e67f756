package report

import "testing"

// The kexec codes: refusals exit 8 and tell the caller to reboot instead;
// only EBUSY is worth another try; a missing config is the disk's class
// (5), where a reboot would not help either.
func TestKexecCodes(t *testing.T) {
	for _, c := range []string{CodeKexecDisabled, CodeKexecLockdown, CodeKexecSecureBoot, CodeKexecUnsupported, CodeKexecNotPermitted,
		CodeKexecBusy, CodeKexecSignatureRequired, CodeKexecNoKernel, CodeKexecFailed} {
		if ExitCode(c) != 8 || !KexecFallback(c) || Retryable(c) != (c == CodeKexecBusy) {
			t.Errorf("%s: exit %d, fallback %v, retryable %v", c, ExitCode(c), KexecFallback(c), Retryable(c))
		}
	}
	for _, c := range []string{CodeConfigNotVerified, CodeDiskNotImaged} {
		if ExitCode(c) != 5 || KexecFallback(c) || Retryable(c) {
			t.Errorf("%s: exit %d, fallback %v, retryable %v", c, ExitCode(c), KexecFallback(c), Retryable(c))
		}
	}
}
