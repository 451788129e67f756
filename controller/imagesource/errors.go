package imagesource

import (
	"errors"
	"fmt"
)

// Reason is a machine-readable cause, fit for a NodeClass condition reason.
type Reason string

// Reasons Resolve reports. The controller sets the NodeClass not Ready with
// the reason and the error's message.
const (
	ReasonInvalidSettings   Reason = "ImageSettingsInvalid"
	ReasonManifestMissing   Reason = "ImageManifestMissing"
	ReasonManifestInvalid   Reason = "ImageManifestInvalid"
	ReasonWrongArchitecture Reason = "ImageWrongArchitecture"
	ReasonFormatUnavailable Reason = "ImageFormatUnavailable"
	ReasonObjectMissing     Reason = "ImageObjectMissing"
	ReasonDigestMismatch    Reason = "ImageDigestMismatch"
	ReasonAccessDenied      Reason = "ImageBucketAccessDenied"
	ReasonBucketMissing     Reason = "ImageBucketMissing"
	ReasonUnreachable       Reason = "ImageStoreUnreachable"
	// ReasonNoMetalISO: the image cannot take its config from the disk
	// (Image.DiskConfigDelivery); only configDelivery: MaintenanceAPI works.
	ReasonNoMetalISO Reason = "ImageLacksMetalISO"

	// ReasonManifestPinMismatch: the manifest's sha256 is not the NodeClass's manifestSHA256.
	ReasonManifestPinMismatch Reason = "ImageManifestPinMismatch"
)

// Error is what Resolve returns on failure. Match it with errors.Is against
// the sentinel of the reason (ErrManifestMissing, ...) or read Reason with
// ReasonOf. Its message never holds credentials or URL query strings.
type Error struct {
	Reason Reason
	// Key is the object (bucket/key or redacted URL) concerned, when one is.
	Key string
	Err error
}

func (e *Error) Error() string {
	switch {
	case e.Err == nil && e.Key == "":
		return string(e.Reason)
	case e.Err == nil:
		return fmt.Sprintf("%s: %s", e.Reason, e.Key)
	case e.Key == "":
		return e.Err.Error()
	}
	return fmt.Sprintf("%s: %v", e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches any *Error with the same Reason, so the sentinels below work
// with errors.Is.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Reason == e.Reason && t.Err == nil && t.Key == ""
}

// Sentinels for errors.Is.
var (
	ErrInvalidSettings   = &Error{Reason: ReasonInvalidSettings}
	ErrManifestMissing   = &Error{Reason: ReasonManifestMissing}
	ErrManifestInvalid   = &Error{Reason: ReasonManifestInvalid}
	ErrWrongArchitecture = &Error{Reason: ReasonWrongArchitecture}
	ErrFormatUnavailable = &Error{Reason: ReasonFormatUnavailable}
	ErrObjectMissing     = &Error{Reason: ReasonObjectMissing}
	ErrDigestMismatch    = &Error{Reason: ReasonDigestMismatch}
	ErrAccessDenied      = &Error{Reason: ReasonAccessDenied}
	ErrBucketMissing     = &Error{Reason: ReasonBucketMissing}
	ErrUnreachable       = &Error{Reason: ReasonUnreachable}
	ErrNoMetalISO        = &Error{Reason: ReasonNoMetalISO}

	ErrManifestPinMismatch = &Error{Reason: ReasonManifestPinMismatch}
)

// ReasonOf returns the Reason of err, or "" when err is not from this package.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Retryable says whether the same Resolve may succeed later without anyone
// changing the bucket or the settings (network trouble).
func Retryable(err error) bool {
	return ReasonOf(err) == ReasonUnreachable
}
