package publish

import (
	"errors"
	"fmt"
	"net"

	"github.com/minio/minio-go/v7"
)

// Error codes in the summary's error.code (stable, snake_case).
const (
	CodeInvalidArgument  = "invalid_argument"
	CodeInputUnreachable = "input_unreachable"
	CodeCorruptInput     = "corrupt_input"
	CodeTruncatedInput   = "truncated_input"
	CodeUnsupportedInput = "unsupported_input"
	CodeNotDiskImage     = "not_disk_image"
	CodeS3AccessDenied   = "s3_access_denied"
	CodeS3NoSuchBucket   = "s3_no_such_bucket"
	CodeS3Unreachable    = "s3_unreachable"
	CodeS3Error          = "s3_error"
	CodeConflict         = "conflict"
	CodeInterrupted      = "interrupted"
	CodeInternal         = "internal"
)

// ExitCode maps an error code to the process exit status.
//
//	0 published (or already there)   2 bad flags or environment
//	3 input unreachable              4 input corrupt, truncated, unsupported or not a disk image
//	5 S3 credentials refused         6 other S3 failure (no bucket, unreachable, server error)
//	7 conflict: another image is already published at these keys
//	130 interrupted                  1 internal error
func ExitCode(code string) int {
	switch code {
	case "":
		return 0
	case CodeInvalidArgument:
		return 2
	case CodeInputUnreachable:
		return 3
	case CodeCorruptInput, CodeTruncatedInput, CodeUnsupportedInput, CodeNotDiskImage:
		return 4
	case CodeS3AccessDenied:
		return 5
	case CodeS3NoSuchBucket, CodeS3Unreachable, CodeS3Error:
		return 6
	case CodeConflict:
		return 7
	case CodeInterrupted:
		return 130
	}
	return 1
}

// Error is a publish failure with its code.
type Error struct {
	Code string
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of err (CodeInternal for an uncoded error).
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// s3Error classifies an S3 failure; what names the operation and key.
func s3Error(what string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AuthorizationHeaderMalformed",
		// versitygw answers an unknown access key with 404 XAdminUserNotFound.
		"XAdminUserNotFound":
		return &Error{Code: CodeS3AccessDenied, Err: fmt.Errorf("%s: access denied by the S3 server (%s): check %s/%s and the key's permissions on the bucket", what, resp.Code, EnvAccessKey, EnvSecretKey)}
	case "NoSuchBucket":
		return &Error{Code: CodeS3NoSuchBucket, Err: fmt.Errorf("%s: bucket %q does not exist", what, resp.BucketName)}
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return &Error{Code: CodeS3Unreachable, Err: fmt.Errorf("%s: S3 endpoint unreachable: %w", what, err)}
	}
	if resp.StatusCode == 401 || resp.StatusCode == 403 {
		return &Error{Code: CodeS3AccessDenied, Err: fmt.Errorf("%s: access denied by the S3 server (HTTP %d %s)", what, resp.StatusCode, resp.Code)}
	}
	return &Error{Code: CodeS3Error, Err: fmt.Errorf("%s: %w", what, err)}
}
