package frame

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/simba-go/simba/backend"
)

// TokenLen is the length of the token in front of a stored record's value.
const TokenLen = 8

// Encode returns the stored form of value written with token: token, 8
// bytes big-endian, then value. Encode(token+1, nil) is the least stored
// form with a token above token, so a stored record's token is at most
// token exactly when the record is less than it, byte by byte.
func Encode(token uint64, value []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, TokenLen+len(value)), token), value...)
}

// Token returns the token in front of stored, and false when stored is
// too short to hold one.
func Token(stored []byte) (uint64, bool) {
	if len(stored) < TokenLen {
		return 0, false
	}
	return binary.BigEndian.Uint64(stored), true
}

// Decode returns the record at key stored as stored: its Key, Token and
// Value (a copy, never nil); the caller sets its Version, which the store
// keeps apart. When stored is too short to hold the token it returns a
// *backend.MalformedError that says so, quoting stored.
func Decode(key string, stored []byte) (backend.Record, *backend.MalformedError) {
	token, ok := Token(stored)
	if !ok {
		return backend.Record{}, &backend.MalformedError{
			Key:    key,
			Reason: fmt.Sprintf("value %s of %d bytes, shorter than the %d-byte token in front of every record", Quote(stored), len(stored), TokenLen),
		}
	}
	return backend.Record{Key: key, Value: append([]byte{}, stored[TokenLen:]...), Token: token}, nil
}

// MaxQuoted bounds the bytes of a stored value that Quote quotes.
const MaxQuoted = 32

// Quote quotes the first MaxQuoted bytes of b as a Go string literal, with
// "…" after it when b is longer: a stored value in an error message.
func Quote(b []byte) string {
	if len(b) <= MaxQuoted {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:MaxQuoted])) + "…"
}
