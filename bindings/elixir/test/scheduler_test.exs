defmodule KuraGate.SchedulerTest do
  # A tick too large for a normal scheduler never holds one: the NIF stops
  # counting at its bound and answers :dirty, and the library runs it on a
  # dirty CPU scheduler. Not async: the system monitor is global.
  use ExUnit.Case, async: false

  @now "2026-07-21T10:00:00Z"

  # Few servers (the library's own pre-check sends it to the normal
  # scheduler), one of them carrying a huge aggregate field the gate does
  # not read: valid, and about a million terms.
  defp huge_tick do
    padding = Map.new(1..200_000, fn i -> {"x#{i}", [i, i, i, i]} end)

    %{
      "now" => @now,
      "wave" => 0,
      "waveStartedAt" => @now,
      "attempt" => 1,
      "servers" => [
        %{
          "id" => "s1",
          "wave" => 0,
          "converged" => false,
          "status" => "active",
          "health" => %{"pods" => padding}
        }
      ]
    }
  end

  test "a very large map is handed to a dirty scheduler after bounded work" do
    {:ok, %KuraGate{ref: ref} = gate} = KuraGate.new(%{})
    tick = huge_tick()
    assert KuraGate.scheduler_for(tick) == :normal

    {micros, answer} = :timer.tc(fn -> KuraGate.Native.tick(ref, tick) end)
    assert answer == :dirty
    # The bound is ~10,000 terms (about a millisecond); generous for a
    # loaded machine, far below the full conversion (~1 s in a debug build).
    assert micros < 100_000, "normal-scheduler call took #{micros} µs"

    :erlang.system_monitor(self(), [{:long_schedule, 200}])

    try do
      assert {:ok, %{verdict: :soak, signal: :not_converged}, _} = KuraGate.tick(gate, tick)
    after
      :erlang.system_monitor(:undefined)
    end

    me = self()
    refute_received {:monitor, ^me, :long_schedule, _}
  end
end
