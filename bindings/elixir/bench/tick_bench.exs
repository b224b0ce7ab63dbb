# One tick at 100 and 1,000 servers through the NIF (benches/PERFORMANCE.md,
# "The gate from Go and Elixir"). Documents from
# `cargo run --release -p kura-benches --bin gate-tick-docs -- DIR`:
#
#   KURA_GATE_NIF_PROFILE=release KURA_GATE_BENCH_DOCS=DIR MIX_ENV=bench \
#     mix run bench/tick_bench.exs
#
# binary: the JSON document in, the verdict as terms out (tick/2 picks the
# scheduler); map: the same document as Elixir terms (string keys); the
# normal/dirty rows force the scheduler through the NIF directly.
dir = System.fetch_env!("KURA_GATE_BENCH_DOCS")

measure = fn fun ->
  # Best mean over 5 rounds of at least 0.5 s each, in microseconds.
  for _ <- 1..20, do: fun.()

  for _ <- 1..5 do
    {us, n} =
      Stream.iterate(1, &(&1 * 2))
      |> Enum.reduce_while(nil, fn n, _ ->
        {us, _} = :timer.tc(fn -> for _ <- 1..n, do: fun.() end)
        if us > 500_000, do: {:halt, {us, n}}, else: {:cont, nil}
      end)

    us / n
  end
  |> Enum.min()
end

for servers <- [100, 1000] do
  doc = File.read!(Path.join(dir, "tick-#{servers}.json"))
  {:ok, map} = KuraGate.decode_json(doc)
  {:ok, gate} = KuraGate.new(%{})
  {:ok, _, _} = KuraGate.tick(gate, doc)
  ref = Map.fetch!(gate, :ref)

  rows = [
    {"tick/2, JSON binary (#{KuraGate.scheduler_for(doc)})", fn -> {:ok, _, _} = KuraGate.tick(gate, doc) end},
    {"tick/2, map (#{KuraGate.scheduler_for(map)})", fn -> {:ok, _, _} = KuraGate.tick(gate, map) end},
    # A tick this large does not run on a normal scheduler: the NIF looks
    # (bounded) and answers :dirty; these rows are the cost of that look.
    {"NIF tick, binary, normal scheduler (answers :dirty)", fn -> :dirty = KuraGate.Native.tick(ref, doc) end},
    {"NIF tick, binary, dirty CPU scheduler", fn -> {:ok, _} = KuraGate.Native.tick_dirty(ref, doc) end},
    {"NIF tick, map, normal scheduler (answers :dirty)", fn -> :dirty = KuraGate.Native.tick(ref, map) end}
  ]

  for {name, fun} <- rows do
    IO.puts("#{servers} servers, #{name}: #{Float.round(measure.(fun) / 1000, 3)} ms")
  end
end

# The binding's own cost per call, with almost no gate or JSON work.
{:ok, gate} = KuraGate.new(%{})
IO.puts("crossing (dump_state of an empty gate): #{Float.round(measure.(fn -> KuraGate.dump_state(gate) end), 2)} µs")
