package kuragate

import "fmt"

// ErrorCode says what kind of refusal an Error is (the ABI's codes).
type ErrorCode string

// The ABI's error codes (docs/gate-abi.md); a test checks them against
// the library's own list.
const (
	InvalidInput    ErrorCode = "invalid_input"
	InvalidConfig   ErrorCode = "invalid_config"
	InvalidState    ErrorCode = "invalid_state"
	AttemptWentBack ErrorCode = "attempt_went_back"
	NullArgument    ErrorCode = "null_argument"
	InputTooLarge   ErrorCode = "input_too_large"
	Busy            ErrorCode = "busy"
	Internal        ErrorCode = "internal"
	InvalidHandle   ErrorCode = "invalid_handle"
)

// Error is a refusal by the gate: a code and a message that locates the
// problem (field path and server, or line and column for JSON).
type Error struct {
	// Status is the ABI's numeric status.
	Status int `json:"-"`
	// Code is the kind of refusal.
	Code ErrorCode `json:"code"`
	// Message says what is wrong and where.
	Message string `json:"message"`
	// Field is the field path at fault, when known.
	Field *string `json:"field"`
	// Server is the server id at fault, when known.
	Server *string `json:"server"`
	// Line and Column locate JSON and UTF-8 errors (from 1).
	Line   *int `json:"line"`
	Column *int `json:"column"`
}

func (e *Error) Error() string { return fmt.Sprintf("kuragate: %s: %s", e.Code, e.Message) }

func decodeError(status int, doc []byte) error {
	e := &Error{Status: status}
	if err := decodeStrict(doc, e); err != nil {
		return &Error{Status: status, Code: Internal,
			Message: fmt.Sprintf("undecodable error document (status %d): %v", status, err)}
	}
	return e
}
