package config

import (
	"errors"

	"github.com/external-ip/external-ip/pkg/errkind"
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

func invalidf(format string, args ...any) error {
	return errkind.Errorf(ErrInvalid, format, args...)
}

func decodef(format string, args ...any) error {
	return errkind.Errorf(ErrDecode, format, args...)
}

func argsf(format string, args ...any) error {
	return errkind.Errorf(ErrArgs, format, args...)
}
