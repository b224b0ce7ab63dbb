defmodule KuraGate.LibraryTest do
  use ExUnit.Case, async: true

  test "signals and verdict kinds come from the library" do
    d = KuraGate.describe()
    assert d["abiVersion"] == 2
    assert KuraGate.signals() == Enum.map(d["signals"], &String.to_atom/1)
    assert :soaking in KuraGate.signals() and :wave_deadline_exceeded in KuraGate.signals()
    assert :update_paused in KuraGate.signals() and :instance_suspended in KuraGate.signals()
    assert d["verdicts"] == ["pass", "soak", "hard_stop"]
    assert d["defaultConfig"]["soakSeconds"] == [900, 300]
    assert d["defaultConfig"]["backlogDrainWindowSeconds"] == 900
    assert "suspended" in d["healthFields"] and "updatePaused" in d["healthFields"]
  end

  test "check 19: an update pause stops the wave, converged or not, and names the pause" do
    {:ok, gate} = KuraGate.new(%{})
    now = ~U[2026-07-21 10:00:00Z]

    pause = %{
      strategy: "OnDelete",
      template_image: "kura:0.7",
      held_pods: ["eu-1-0"]
    }

    tick = %{
      now: now,
      wave: 0,
      wave_started_at: now,
      attempt: 1,
      servers: [
        %{
          id: "eu-1",
          wave: 0,
          converged: false,
          deployment: :running,
          status: :active,
          baseline: nil,
          health: %{update_paused: pause}
        }
      ]
    }

    assert {:ok, %{verdict: :hard_stop, signal: :update_paused, evidence: [e]}, _} =
             KuraGate.tick(gate, tick)

    assert e.update_paused == %{
             strategy: "OnDelete",
             partition: nil,
             template_image: "kura:0.7",
             held_pods: ["eu-1-0"]
           }

    assert e.detail == "OnDelete pause, template image kura:0.7, holding eu-1-0"
  end

  test "the drain window: an outbox above its band fails once it has not fallen for it" do
    {:ok, gate} = KuraGate.new(%{soak_seconds: [3600], backlog_drain_window_seconds: 600})
    start = ~U[2026-07-21 10:00:00Z]

    health = fn at ->
      %{
        sampled_at: at,
        expected_pods: 1,
        sampled_pods: 1,
        ready: true,
        serving: true,
        ring_consistent: true,
        bootstrap_inflight_peers: 0,
        backfill_degraded: false,
        backfill_budget_exhausted_peers: 0,
        outbox_messages: 400,
        fd_timeout_count: 0,
        peer_connection_failures: 0,
        memory_pressure_state: 0
      }
    end

    tick = fn seconds ->
      now = DateTime.add(start, seconds)

      %{
        now: now,
        wave: 0,
        wave_started_at: start,
        attempt: 1,
        servers: [
          %{
            id: "eu-1",
            wave: 0,
            converged: true,
            deployment: :succeeded,
            status: :active,
            baseline: %{
              captured_at: DateTime.add(start, -10),
              counters: %{outbox_messages: 100, fd_timeout_count: 0, peer_connection_failures: 0},
              soak_eligible: true
            },
            health: health.(now)
          }
        ]
      }
    end

    assert {:ok, %{signal: :soaking}, gate} = KuraGate.tick(gate, tick.(60))
    assert {:ok, %{signal: :soaking}, gate} = KuraGate.tick(gate, tick.(659))

    assert {:ok, %{signal: :outbox_regressed, evidence: [e]}, _} = KuraGate.tick(gate, tick.(660))

    assert e.run == %{since: "2026-07-21T10:01:00Z", level: 400}
    assert {e.observed, e.band_top, e.baseline} == {400, 150, 100}
  end

  test "judge_instance gives the agent's status.rolloutGate" do
    assert {:ok, gate} =
             KuraGate.judge_instance(%{
               instance: "ns/kura",
               previous: nil,
               spec_image: "kura:2",
               baseline_source: nil,
               current: nil,
               now: ~U[2026-07-21 10:00:00Z]
             })

    assert %{"targetImage" => "kura:2", "verdict" => "unhealthy", "signal" => "sample_missing"} =
             gate

    assert {:error, %KuraGate.Error{code: :invalid_input, line: 1}} =
             KuraGate.judge_instance(~s({"instance": 5}))
  end

  test "the README shows the module's doctest" do
    readme = File.read!(Path.expand("../../../README.md", __DIR__))
    [_, section] = String.split(readme, "## Use the gate from your orchestrator", parts: 2)
    [_, block] = String.split(section, "```elixir\n", parts: 2)
    [block, _] = String.split(block, "```", parts: 2)
    source = File.read!(Path.expand("../lib/kura_gate.ex", __DIR__))
    norm = fn s -> s |> String.split() |> Enum.join(" ") end

    assert String.contains?(norm.(source), norm.(block)),
           "README's Elixir block is not the doctest"
  end
end
