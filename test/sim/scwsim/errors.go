package scwsim

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is an answer other than 2xx. Bodies follow the shapes the SDK
// decodes in scw/errors.go (typed errors carry "type"), with the messages the
// Scaleway API uses for them; see faithful/approximated notes in doc.go.
type apiError struct {
	status int
	body   any
	// unrecorded: no public recording shows this answer; Options.Unrecorded
	// reshapes it.
	unrecorded bool
}

func (e *apiError) Error() string { return http.StatusText(e.status) }

// errGone is the recorded answer for a server that was deleted: an untyped
// 404 the SDK decodes as a plain *scw.ResponseError.
func errGone() *apiError {
	return &apiError{status: http.StatusNotFound, body: map[string]string{"message": "Not Found"}}
}

// errNotFound is the standard typed not_found (*scw.ResourceNotFoundError).
func errNotFound(resource, id string) *apiError {
	return &apiError{status: http.StatusNotFound, body: map[string]string{"message": "resource is not found",
		"resource": resource, "resource_id": id, "type": "not_found"}}
}

// errMessage is an untyped error with a message, like the recorded
// 400 {"message":"Server is not delivered"}.
func errMessage(status int, msg string) *apiError {
	return &apiError{status: status, body: map[string]string{"message": msg}}
}

func errNotDelivered() *apiError { return errMessage(http.StatusBadRequest, "Server is not delivered") }

// errTransient is the typed transient_state (*scw.TransientStateError).
func errTransient(resource, id, state string) *apiError {
	return &apiError{status: http.StatusConflict, body: map[string]string{"current_state": state,
		"message": "resource is in a transient state", "resource": resource, "resource_id": id, "type": "transient_state"},
		unrecorded: true}
}

type quotaDetail struct {
	Current  int    `json:"current"`
	Quota    int    `json:"quota"`
	Resource string `json:"resource"`
}

// errQuota is the typed quotas_exceeded (*scw.QuotasExceededError).
func errQuota(resource string, current, quota int) *apiError {
	return &apiError{status: http.StatusForbidden, body: map[string]any{
		"details": []quotaDetail{{Current: current, Quota: quota, Resource: resource}},
		"message": "quota(s) exceeded for this resource", "type": "quotas_exceeded"}, unrecorded: true}
}

// errOutOfStock is the typed out_of_stock (*scw.OutOfStockError). Scaleway
// answers it with 412 Precondition Failed.
func errOutOfStock(resource string) *apiError {
	return &apiError{status: http.StatusPreconditionFailed, body: map[string]string{"message": "resource is out of stock",
		"resource": resource, "type": "out_of_stock"}, unrecorded: true}
}

type argDetail struct {
	ArgumentName string `json:"argument_name"`
	HelpMessage  string `json:"help_message"`
	Reason       string `json:"reason"` // required, format, constraint, unknown
}

// errInvalid is the typed invalid_arguments (*scw.InvalidArgumentsError).
func errInvalid(arg, reason, help string) *apiError {
	return &apiError{status: http.StatusBadRequest, body: map[string]any{
		"details": []argDetail{{ArgumentName: arg, HelpMessage: help, Reason: reason}},
		"message": "invalid argument(s)", "type": "invalid_arguments"}}
}

type permDetail struct {
	Action   string `json:"action"`
	Resource string `json:"resource"`
}

// errPermission is the typed permissions_denied (*scw.PermissionsDeniedError).
func errPermission(resource, action string) *apiError {
	return &apiError{status: http.StatusForbidden, body: map[string]any{
		"details": []permDetail{{Action: action, Resource: resource}},
		"message": "insufficient permissions", "type": "permissions_denied"}}
}

// errPrecondition is the typed precondition_failed (*scw.PreconditionFailedError).
func errPrecondition(precondition, help string) *apiError {
	return &apiError{status: http.StatusPreconditionFailed, body: map[string]string{"help_message": help,
		"message": "precondition failed", "precondition": precondition, "type": "precondition_failed"}, unrecorded: true}
}

// errConflict is an untyped 409.
func errConflict(msg string) *apiError {
	return &apiError{status: http.StatusConflict, body: map[string]string{"message": msg, "type": "conflict"}}
}

// errAuth is the typed denied_authentication (*scw.DeniedAuthenticationError).
func errAuth(reason string) *apiError {
	return &apiError{status: http.StatusUnauthorized, body: map[string]string{"message": "authentication is denied",
		"method": "api_key", "reason": reason, "type": "denied_authentication"}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeErr(w http.ResponseWriter, e *apiError) { writeJSON(w, e.status, e.body) }
