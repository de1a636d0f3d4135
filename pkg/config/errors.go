package config

import (
	"errors"
	"fmt"
)

// The kinds of error this package returns; test with errors.Is.
var (
	// ErrDecode: the config is not the JSON we expect (CNI code 6).
	ErrDecode = errors.New("cannot decode network config")
	// ErrInvalid: a key or a requested IP is refused (CNI code 7).
	ErrInvalid = errors.New("invalid network config or request")
	// ErrArgs: CNI_ARGS is malformed (CNI code 4).
	ErrArgs = errors.New("invalid CNI_ARGS")
)

// kindError carries a kind for errors.Is without repeating the kind's text in
// every message: the message alone already names the field and the value.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func invalidf(format string, args ...any) error {
	return &kindError{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

func decodef(format string, args ...any) error {
	return &kindError{kind: ErrDecode, msg: fmt.Sprintf(format, args...)}
}

func argsf(format string, args ...any) error {
	return &kindError{kind: ErrArgs, msg: fmt.Sprintf(format, args...)}
}
