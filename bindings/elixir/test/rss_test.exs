defmodule KuraGate.RSSTest do
  # Runs after the async tests (async: false), alone in the BEAM then.
  use ExUnit.Case, async: false
  import KuraGate.TestSupport

  @tag timeout: 600_000
  test "RSS stays flat over 100,000 ticks and errors" do
    {:ok, gate} = KuraGate.new(%{soak_seconds: [60]})
    {:ok, good} = KuraGate.decode_json(~s({"now": "2026-07-21T10:00:00Z", "wave": 0,
      "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1, "servers": [
      {"id": "s1", "wave": 0, "converged": true, "status": "active", "baseline": null,
       "health": {"sampledAt": "2026-07-21T09:59:55Z", "ready": true}}]}))
    bad = %{good | "attempt" => "x"}

    samples =
      for i <- 1..100_000, reduce: [] do
        acc ->
          {:ok, _, _} = KuraGate.tick(gate, good)
          {:error, _} = KuraGate.tick(gate, bad)

          if rem(i, 10) == 0 do
            {:ok, r} = KuraGate.restore(%{soak_seconds: [60]}, KuraGate.dump_state(gate))
            {:ok, _, _} = KuraGate.tick(r, good)
          end

          if rem(i, 10_000) == 0 do
            :erlang.garbage_collect()
            [{rss_kib(), div(:erlang.memory(:total), 1024)} | acc]
          else
            acc
          end
      end
      |> Enum.reverse()

    IO.puts(
      "\n[elixir RSS] (OS RSS KiB, BEAM total KiB) every 10,000 rounds: #{inspect(samples)}"
    )

    {first, _} = hd(samples)
    {last, _} = List.last(samples)
    assert last - first < 16 * 1024, "RSS grew by #{last - first} KiB"
  end
end
