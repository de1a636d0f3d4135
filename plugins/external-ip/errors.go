package main

import (
	"errors"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/localpool"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// Plugin error codes beyond the CNI spec's; the README lists them.
const (
	codeHost        = 100 // the kernel refused a change
	codeAnnounce    = 101 // a conflict probe or the first round could not be sent
	codeUnreachable = 102 // a sysctl keeps the LAN from reaching the IP
	codeConflict    = 103 // another host answered for the IP
	codeDrift       = 104 // CHECK found state or host not as recorded
	codeExhausted   = 105 // the pool has no free IP
)

// codes maps each kind of error to its CNI code, in one place.
var codes = []struct {
	kind error
	code uint
}{
	{config.ErrDecode, types.ErrDecodingFailure},
	{config.ErrArgs, types.ErrInvalidEnvironmentVariables},
	{config.ErrInvalid, types.ErrInvalidNetworkConfig},
	{assigner.ErrRefused, types.ErrInvalidNetworkConfig},
	{assigner.ErrLockTimeout, types.ErrTryAgainLater},
	{assigner.ErrState, types.ErrIOFailure},
	{assigner.ErrHost, codeHost},
	{announce.ErrAnnounce, codeAnnounce},
	{assigner.ErrUnreachable, codeUnreachable},
	{announce.ErrConflict, codeConflict},
	{assigner.ErrDrift, codeDrift},
	{nodeapi.ErrUnavailable, types.ErrTryAgainLater},
	{nodeapi.ErrRefused, types.ErrInvalidNetworkConfig},
	{nodeapi.ErrExhausted, codeExhausted},
	{nodeapi.ErrFiles, types.ErrIOFailure},
	{localpool.ErrExhausted, codeExhausted},
	{localpool.ErrOwned, types.ErrInvalidNetworkConfig},
	{localpool.ErrTaken, types.ErrTryAgainLater},
	{localpool.ErrInUse, codeConflict},
}

// cniError turns err into the CNI error the runtime prints. An error about
// one IP is prefixed with where that IP was asked for.
func cniError(err error, reqs []config.IP) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, r := range reqs {
		if strings.HasPrefix(msg, r.Addr.String()+":") {
			msg = r.Source + ": " + msg
			break
		}
	}
	code := uint(types.ErrInternal)
	for _, c := range codes {
		if errors.Is(err, c.kind) {
			code = c.code
			break
		}
	}
	return types.NewError(code, msg, "")
}
