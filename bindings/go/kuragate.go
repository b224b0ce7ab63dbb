// Package kuragate runs the Kura rollout gate (the Rust crate kura-gate,
// contract/gate.md) inside a Go process, through its C ABI
// (gate/ffi/include/kura_gate.h), linked statically: nothing to find at run
// time.
//
// Every decision is made by the Rust gate; this package only moves
// documents across: typed structs are marshalled to the contract's JSON,
// verdicts come back as JSON and are decoded strictly (unknown fields are
// an error, so a contract change cannot pass unnoticed).
//
// A Gate is safe for concurrent use: calls on one Gate are serialized by a
// mutex (the ABI allows one caller at a time per gate); different Gates run
// in parallel. Close frees the gate; a cleanup frees a forgotten one when
// it is garbage collected, as a backstop only.
//
// Build: the static library must be in ./lib (scripts/bindings-check.sh
// builds it and copies it there).
package kuragate

/*
#cgo CFLAGS: -I${SRCDIR}/../../gate/ffi/include
#cgo LDFLAGS: -L${SRCDIR}/lib -lkura_gate_ffi -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
#include <stdlib.h>
#include "kura_gate.h"
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// ABIVersion is the C ABI version this package was written for; the
// library's version is checked against it at start-up.
const ABIVersion = 2

// abiChecked is the library's ABI version, checked once.
var abiChecked = sync.OnceValue(func() error {
	if got := int(C.kura_gate_abi_version()); got != ABIVersion {
		return fmt.Errorf("kuragate: library ABI version %d, package expects %d", got, ABIVersion)
	}
	return nil
})

// Gate is one wave judge: a configuration and the state carried between
// ticks. Create it with New or Restore; Close it when done.
type Gate struct {
	mu      sync.Mutex
	handle  *C.KuraGate
	cleanup runtime.Cleanup
}

// ErrClosed is returned by calls on a closed Gate.
var ErrClosed = errors.New("kuragate: gate is closed")

// New creates a gate with empty state.
func New(config Config) (*Gate, error) {
	doc, err := json.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("kuragate: encoding config: %w", err)
	}
	return NewJSON(doc)
}

// NewJSON creates a gate from a configuration document (`{}` or `null`
// for the defaults).
func NewJSON(config []byte) (*Gate, error) {
	if err := abiChecked(); err != nil {
		return nil, err
	}
	var handle *C.KuraGate
	var errBuf C.KuraGateBuffer
	cfg, cfgLen := cBytes(config)
	status := C.kura_gate_new(cfg, cfgLen, &handle, &errBuf)
	runtime.KeepAlive(config)
	return wrap(status, handle, errBuf)
}

// Restore creates a gate that continues from a state State returned (e.g.
// read back from Postgres).
func Restore(config Config, state []byte) (*Gate, error) {
	doc, err := json.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("kuragate: encoding config: %w", err)
	}
	return RestoreJSON(doc, state)
}

// RestoreJSON is Restore with a configuration document.
func RestoreJSON(config, state []byte) (*Gate, error) {
	if err := abiChecked(); err != nil {
		return nil, err
	}
	var handle *C.KuraGate
	var errBuf C.KuraGateBuffer
	cfg, cfgLen := cBytes(config)
	st, stLen := cBytes(state)
	status := C.kura_gate_restore(cfg, cfgLen, st, stLen, &handle, &errBuf)
	runtime.KeepAlive(config)
	runtime.KeepAlive(state)
	return wrap(status, handle, errBuf)
}

func wrap(status C.int32_t, handle *C.KuraGate, errBuf C.KuraGateBuffer) (*Gate, error) {
	doc := take(errBuf)
	if status != C.KURA_GATE_OK {
		return nil, decodeError(int(status), doc)
	}
	g := &Gate{handle: handle}
	g.cleanup = runtime.AddCleanup(g, func(h *C.KuraGate) { C.kura_gate_free(h) }, handle)
	return g, nil
}

// Tick judges one tick. On error the gate's state is unchanged.
func (g *Gate) Tick(input TickInput) (Verdict, error) {
	doc, err := json.Marshal(input)
	if err != nil {
		return Verdict{}, fmt.Errorf("kuragate: encoding tick: %w", err)
	}
	out, err := g.TickJSON(doc)
	if err != nil {
		return Verdict{}, err
	}
	var verdict Verdict
	if err := decodeStrict(out, &verdict); err != nil {
		return Verdict{}, fmt.Errorf("kuragate: decoding verdict: %w", err)
	}
	return verdict, nil
}

// TickJSON judges one tick document and returns the verdict document.
func (g *Gate) TickJSON(input []byte) ([]byte, error) {
	return g.call(func(h *C.KuraGate, out *C.KuraGateBuffer) C.int32_t {
		in, inLen := cBytes(input)
		status := C.kura_gate_tick(h, in, inLen, out)
		runtime.KeepAlive(input)
		return status
	})
}

// State returns the state document to store; Restore continues from it.
func (g *Gate) State() ([]byte, error) {
	return g.call(func(h *C.KuraGate, out *C.KuraGateBuffer) C.int32_t {
		return C.kura_gate_state(h, out)
	})
}

// CaptureBaseline captures a server's baseline from its aggregate (nil:
// none) at capturedAt, with this gate's configuration. Pass the result as
// the server's Baseline in every tick of its wave.
func (g *Gate) CaptureBaseline(capturedAt time.Time, health *Health) (*Baseline, error) {
	doc, err := json.Marshal(Baseline{CapturedAt: capturedAt, Health: health})
	if err != nil {
		return nil, fmt.Errorf("kuragate: encoding baseline: %w", err)
	}
	out, err := g.call(func(h *C.KuraGate, out *C.KuraGateBuffer) C.int32_t {
		in, inLen := cBytes(doc)
		status := C.kura_gate_capture_baseline(h, in, inLen, out)
		runtime.KeepAlive(doc)
		return status
	})
	if err != nil {
		return nil, err
	}
	var baseline Baseline
	if err := decodeStrict(out, &baseline); err != nil {
		return nil, fmt.Errorf("kuragate: decoding baseline: %w", err)
	}
	return &baseline, nil
}

// Close frees the gate. Further calls return ErrClosed; closing twice is a
// no-op. It returns an error only when the library no longer knew the gate
// (InvalidHandle), which this package never causes.
func (g *Gate) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handle == nil {
		return nil
	}
	g.cleanup.Stop()
	status := C.kura_gate_free(g.handle)
	g.handle = nil
	if status != C.KURA_GATE_OK {
		return &Error{Status: int(status), Code: InvalidHandle,
			Message: "the library no longer knew this gate (freed outside this package?)"}
	}
	return nil
}

func (g *Gate) call(f func(*C.KuraGate, *C.KuraGateBuffer) C.int32_t) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handle == nil {
		return nil, ErrClosed
	}
	var out C.KuraGateBuffer
	status := f(g.handle, &out)
	doc := take(out)
	if status != C.KURA_GATE_OK {
		return nil, decodeError(int(status), doc)
	}
	return doc, nil
}

// JudgeInstance is the agent's per-instance judgement: the next
// status.rolloutGate of one instance. It needs no Gate.
func JudgeInstance(input InstanceInput) (*RolloutGate, error) {
	doc, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("kuragate: encoding instance input: %w", err)
	}
	out, err := JudgeInstanceJSON(doc)
	if err != nil {
		return nil, err
	}
	var gate RolloutGate
	if err := decodeStrict(out, &gate); err != nil {
		return nil, fmt.Errorf("kuragate: decoding rolloutGate: %w", err)
	}
	return &gate, nil
}

// JudgeInstanceJSON is JudgeInstance on documents.
func JudgeInstanceJSON(input []byte) ([]byte, error) {
	if err := abiChecked(); err != nil {
		return nil, err
	}
	var out C.KuraGateBuffer
	in, inLen := cBytes(input)
	status := C.kura_gate_judge_instance(in, inLen, &out)
	runtime.KeepAlive(input)
	doc := take(out)
	if status != C.KURA_GATE_OK {
		return nil, decodeError(int(status), doc)
	}
	return doc, nil
}

// WhatIfJSON judges a replay document (or an exported timeline) with its
// own configuration and with candidate (a configuration document, `{}` or
// `null` for the defaults), in the wave judge's view or, with agentView,
// the agent's. The answer is `{"differences": [...], "summary": {...}}`:
// the lines and the summary of `kura-gate replay --gate-config FILE --diff`
// (docs/gate-replay.md).
func WhatIfJSON(document, candidate []byte, agentView bool) ([]byte, error) {
	if err := abiChecked(); err != nil {
		return nil, err
	}
	view := C.uint32_t(0)
	if agentView {
		view = 1
	}
	var out C.KuraGateBuffer
	doc, docLen := cBytes(document)
	cand, candLen := cBytes(candidate)
	status := C.kura_gate_what_if(doc, docLen, cand, candLen, view, &out)
	runtime.KeepAlive(document)
	runtime.KeepAlive(candidate)
	answer := take(out)
	if status != C.KURA_GATE_OK {
		return nil, decodeError(int(status), answer)
	}
	return answer, nil
}

// Description is what the library says about itself: every signal and
// verdict, the error codes, the aggregate fields the checks read and the
// default configuration. Bindings take these from here instead of keeping
// their own lists.
type Description struct {
	ABIVersion    int             `json:"abiVersion"`
	MaxInputBytes int             `json:"maxInputBytes"`
	Signals       []Signal        `json:"signals"`
	Verdicts      []VerdictKind   `json:"verdicts"`
	ErrorCodes    [][2]any        `json:"errorCodes"`
	HealthFields  []string        `json:"healthFields"`
	DefaultConfig json.RawMessage `json:"defaultConfig"`
}

var description = sync.OnceValues(func() (Description, error) {
	var out C.KuraGateBuffer
	status := C.kura_gate_describe(&out)
	doc := take(out)
	if status != C.KURA_GATE_OK {
		return Description{}, decodeError(int(status), doc)
	}
	var d Description
	if err := decodeStrict(doc, &d); err != nil {
		return Description{}, fmt.Errorf("kuragate: decoding description: %w", err)
	}
	return d, nil
})

// Describe returns the library's description.
func Describe() (Description, error) { return description() }

// Signals lists every signal the gate can answer, from the library.
func Signals() []Signal {
	d, err := description()
	if err != nil {
		return nil
	}
	return append([]Signal(nil), d.Signals...)
}

// DefaultConfig is the gate's default configuration, from the library.
func DefaultConfig() Config {
	var c Config
	d, err := description()
	if err == nil {
		_ = decodeStrict(d.DefaultConfig, &c)
	}
	return c
}

// empty stands in for the data of an empty Go slice: the ABI refuses NULL.
var empty = C.malloc(1)

// cBytes points C at a Go slice's bytes for the duration of one call (cgo
// pins them; the library never keeps them).
func cBytes(b []byte) (*C.uint8_t, C.size_t) {
	if len(b) == 0 {
		return (*C.uint8_t)(empty), 0
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b))
}

// take copies a library buffer into Go memory and frees it.
func take(buf C.KuraGateBuffer) []byte {
	if buf.data == nil {
		return nil
	}
	out := C.GoBytes(unsafe.Pointer(buf.data), C.int(buf.len))
	C.kura_gate_buffer_free(buf)
	return out
}

func decodeStrict(doc []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the document")
	}
	return nil
}
