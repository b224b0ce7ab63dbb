package kuragate_test

import (
	"encoding/json"
	"fmt"
	"log"
	"time"

	"kura.local/kuragate"
)

// The README's Go example ("Use the gate from your orchestrator"); a test
// checks the README shows exactly this code.
func Example() {
	gate, err := kuragate.New(kuragate.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer gate.Close()

	// status.rolloutHealth of the server's KuraInstance, as the API server has it.
	var health kuragate.Health
	err = json.Unmarshal([]byte(`{"sampledAt": "2026-07-21T09:59:55Z",
		"expectedPods": 3, "sampledPods": 3, "ready": true, "serving": true,
		"ringConsistent": true, "bootstrapInflightPeers": 0, "backfillDegraded": false,
		"backfillBudgetExhaustedPeers": 0, "outboxMessages": 120, "fdTimeoutCount": 4,
		"peerConnectionFailures": 0, "memoryPressureState": 0}`), &health)
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2026, 7, 21, 10, 0, 0, 0, time.UTC)
	baseline, err := gate.CaptureBaseline(now, &health) // when the wave is scheduled
	if err != nil {
		log.Fatal(err)
	}
	succeeded := kuragate.DeploymentSucceeded
	verdict, err := gate.Tick(kuragate.TickInput{
		Now: now, Wave: 0, WaveStartedAt: now, Attempt: 1,
		Servers: []kuragate.Server{{ID: "eu-1", Wave: 0, Converged: true,
			Deployment: &succeeded, Status: kuragate.StatusActive,
			Baseline: baseline, Health: &health}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(verdict.Verdict, *verdict.Signal, *verdict.RemainingSeconds)

	state, err := gate.State() // store it; kuragate.Restore(config, state) continues
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(state))
	// Output:
	// soak soaking 900
	// {"attempt":1,"wave":0,"waveStartedAt":"2026-07-21T10:00:00Z","healthySince":"2026-07-21T10:00:00Z","latched":null,"effectiveBaselines":{}}
}
