package errkind

import (
	"errors"
	"fmt"
	"strings"
)

// kindError is an error of a kind whose message is its own alone: the
// kind's text would only repeat what the message already says.
type kindError struct {
	kind error
	msg  string
	err  error
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Unwrap() []error {
	if e.err == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.err}
}

// Errorf returns an error of kind whose message is the formatted one; a %w
// argument stays in the chain for errors.Is and errors.As.
func Errorf(kind error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &kindError{kind: kind, msg: err.Error(), err: errors.Unwrap(err)}
}

// Prefix returns err with prefix and ": " before its message, keeping its
// kind and chain; an error without a kind is returned as it is.
func Prefix(prefix string, err error) error {
	var ke *kindError
	if err == nil || !errors.As(err, &ke) {
		return err
	}
	return &kindError{kind: ke.kind, msg: prefix + ": " + ke.msg, err: ke.err}
}

// OneLine keeps an error's kinds but puts its message on one line:
// errors.Join puts one error per line, and a CNI error message is one line.
func OneLine(err error) error {
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return &lineError{msg: strings.ReplaceAll(err.Error(), "\n", "; "), err: err}
}

type lineError struct {
	msg string
	err error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.err }
