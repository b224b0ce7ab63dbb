defmodule KuraGate.HostileTest do
  # Hostile input through the NIF: every case is a located error, the BEAM
  # never crashes, and the gate goes on judging afterwards.
  use ExUnit.Case, async: true

  @good_tick ~s({"now": "2026-07-21T10:00:00Z", "wave": 0,
   "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1, "servers": [
   {"id": "s1", "wave": 0, "converged": true, "deployment": "succeeded", "status": "active",
    "baseline": {"capturedAt": "2026-07-21T09:59:50Z", "health": null},
    "health": {"sampledAt": "2026-07-21T09:59:55Z", "expectedPods": 3, "sampledPods": 3,
     "ready": true, "serving": true, "ringConsistent": true}}]})

  defp gate do
    {:ok, gate} = KuraGate.new(%{soak_seconds: [60]})
    gate
  end

  defp good_map do
    {:ok, map} = KuraGate.decode_json(@good_tick)
    map
  end

  defp refused(gate, input, code, parts, located \\ false) do
    assert {:error, %KuraGate.Error{code: ^code} = e} = KuraGate.tick(gate, input)

    for part <- parts do
      assert String.contains?(e.message, part), "#{inspect(e.message)} lacks #{inspect(part)}"
    end

    if located, do: assert(is_integer(e.line) and is_integer(e.column), inspect(e))
    e
  end

  defp nest(0, inner), do: inner
  defp nest(n, inner), do: nest(n - 1, [inner])

  test "hostile JSON binaries are located errors" do
    g = gate()
    big = 10 * 1024 * 1024
    refused(g, "{\n \"now\": ,}", :invalid_input, ["line 2 column 9"], true)
    refused(g, "", :invalid_input, ["EOF"], true)

    refused(
      g,
      String.duplicate("[", 100_000),
      :invalid_input,
      ["recursion limit exceeded at line 1 column 128"],
      true
    )

    refused(
      g,
      String.duplicate("[", 200),
      :invalid_input,
      ["recursion limit exceeded at line 1 column 128"],
      true
    )

    refused(
      g,
      String.duplicate(" ", big) <> "}",
      :invalid_input,
      ["line 1 column 10485761"],
      true
    )

    refused(
      g,
      String.replace(
        @good_tick,
        ~s("attempt": 1),
        ~s("attempt": ") <> String.duplicate("a", big) <> ~s(")
      ),
      :invalid_input,
      ["field attempt: expected a non-negative integer"]
    )

    servers =
      Enum.map_join(0..(div(big, 64) - 1), ",", fn i ->
        ~s({"id": "x#{String.pad_leading(Integer.to_string(i), 7, "0")}", "wave": 0, "converged": true, "status": "active"})
      end)

    count = div(big, 64)

    doc =
      ~s({"now": "2026-07-21T10:00:00Z", "wave": 0, "waveStartedAt": "2026-07-21T10:00:00Z", "attempt": 1, "servers": [) <>
        servers <> ~s(, {"id": 7}]})

    assert byte_size(doc) > big
    assert KuraGate.scheduler_for(doc) == :dirty_cpu
    refused(g, doc, :invalid_input, ["field servers[#{count}].id: expected a string, got 7"])

    refused(g, String.duplicate(" ", 16 * 1024 * 1024 + 1), :input_too_large, [
      "16777217 bytes, above the limit of 16777216"
    ])

    refused(
      g,
      String.replace(@good_tick, ~s("ready": true), ~s("ready": "yes")),
      :invalid_input,
      [~s(server "s1", field health.ready: expected a boolean, got "yes")]
    )

    refused(
      g,
      String.replace(@good_tick, ~s("attempt": 1), ~s("attempt": 1e400)),
      :invalid_input,
      ["number out of range"],
      true
    )

    refused(
      g,
      String.replace(@good_tick, ~s("attempt": 1), ~s("attempt": 4294967296)),
      :invalid_input,
      ["field attempt: 4294967296 is out of range", "the largest accepted is 4294967295"]
    )

    refused(g, String.replace(@good_tick, ~s("wave": 0,), ~s("wave": -1,)), :invalid_input, [
      "field wave: expected a non-negative integer, got -1"
    ])

    refused(
      g,
      String.replace(@good_tick, ~s("s1"), "\"s\0001\""),
      :invalid_input,
      ["control character"],
      true
    )

    refused(g, <<0>> <> @good_tick, :invalid_input, ["line 1 column 1"], true)

    refused(
      g,
      String.replace(@good_tick, ~s("s1"), <<?", ?s, 0xFF, ?1, ?">>),
      :invalid_input,
      ["not UTF-8: invalid byte at line 3 column 13"],
      true
    )

    assert {:ok, %{verdict: :soak}, _} = KuraGate.tick(g, @good_tick)
  end

  test "hostile terms are located errors" do
    g = gate()
    tick = good_map()
    [server] = tick["servers"]
    with_server = fn s -> %{tick | "servers" => [s]} end

    refused(g, %{tick | "attempt" => 2 ** 70}, :invalid_input, [
      "field attempt: integer out of the 64-bit range"
    ])

    refused(g, %{tick | "attempt" => -5}, :invalid_input, [
      "field attempt: expected a non-negative integer, got -5"
    ])

    refused(g, %{tick | "attempt" => 1.5}, :invalid_input, [
      "field attempt: expected a non-negative integer, got 1.5"
    ])

    refused(g, %{tick | "attempt" => :lots}, :invalid_input, [
      ~s(field attempt: expected a non-negative integer, got "lots")
    ])

    refused(g, %{tick | "now" => {2026, 7, 21}}, :invalid_input, [
      "field now: Tuple terms have no JSON form"
    ])

    refused(g, %{tick | "now" => self()}, :invalid_input, [
      "field now: Pid terms have no JSON form"
    ])

    refused(
      g,
      %{
        tick
        | "now" =>
            DateTime.from_naive!(~N[2026-07-21 10:00:00], "Etc/UTC")
            |> Map.put(:time_zone, "Europe/Paris")
      },
      :invalid_input,
      ["field now: a DateTime must be in UTC"]
    )

    refused(g, %{tick | "now" => ~D[2026-07-21]}, :invalid_input, [
      "field now: a %Elixir.Date{} struct has no JSON form"
    ])

    refused(g, Map.put(tick, {:a, :b}, 1), :invalid_input, [
      "a map key that is not an atom or a UTF-8 string"
    ])

    refused(g, Map.put(tick, <<0xFF>>, 1), :invalid_input, [
      "a map key that is not an atom or a UTF-8 string"
    ])

    refused(g, with_server.(%{server | "id" => <<?s, 0xFF>>}), :invalid_input, [
      "field servers[0].id: not UTF-8 (byte offset 1)"
    ])

    refused(g, %{tick | "servers" => [1 | 2]}, :invalid_input, ["field servers: an improper list"])

    refused(g, %{tick | "servers" => nest(10_000, [])}, :invalid_input, [
      "nested 128 levels deep"
    ])

    # The same on a dirty CPU scheduler (a smaller stack): more than 50 servers.
    many = for i <- 1..100, do: %{server | "id" => "s#{i}"}
    deep = %{tick | "servers" => many ++ [nest(10_000, [])]}
    assert KuraGate.scheduler_for(deep) == :dirty_cpu
    refused(g, deep, :invalid_input, ["field servers[100][0][0]", "nested 128 levels deep"])

    assert {:error, %KuraGate.Error{message: "field [0][0]" <> _}} =
             KuraGate.encode_json(nest(10_000, []))

    assert {:ok, _} =
             KuraGate.decode_json(String.duplicate("[", 127) <> String.duplicate("]", 127))

    assert {:error, %KuraGate.Error{line: 1}} =
             KuraGate.decode_json(String.duplicate("[", 10_000))

    refused(g, %{tick | "servers" => List.duplicate(0, 4_000_001)}, :input_too_large, [
      "more than 4000000 terms"
    ])

    refused(
      g,
      with_server.(Map.put(server, "health", %{server["health"] | "ready" => "yes"})),
      :invalid_input,
      [~s(server "s1", field health.ready: expected a boolean, got "yes")]
    )

    refused(g, Map.put(tick, :wave_start, 1), :invalid_input, ["field waveStart: unknown field"])
    refused(g, [1, 2], :invalid_input, ["field (tick): expected an object"])
    refused(g, :not_a_tick, :invalid_input, ["expected an object"])

    # An escaped NUL in an id is a valid string: judged and returned as it is.
    assert {:ok, %{server_id: "s\0001"}, _} =
             KuraGate.tick(g, with_server.(%{server | "id" => "s\0001", "converged" => false}))

    assert {:ok, %{verdict: :soak}, _} = KuraGate.tick(g, tick)
  end

  test "an attempt going back is refused and leaves the state alone" do
    g = gate()
    assert {:ok, _, _} = KuraGate.tick(g, @good_tick)
    before = KuraGate.dump_state(g)

    e =
      refused(
        g,
        String.replace(@good_tick, ~s("attempt": 1), ~s("attempt": 0)),
        :attempt_went_back,
        ["field attempt: attempt 0 is lower than the attempt 1 already judged"]
      )

    assert e.field == "attempt"
    assert KuraGate.dump_state(g) == before
  end

  test "hostile configs and states are refused" do
    assert {:error, %KuraGate.Error{code: :invalid_config, field: "config.soakSeconds"}} =
             KuraGate.new(%{soak_seconds: []})

    assert {:error,
            %KuraGate.Error{
              code: :invalid_config,
              message: "field config.maxSampleAge: unknown field"
            }} = KuraGate.new(%{"maxSampleAge" => 5})

    assert {:error, %KuraGate.Error{code: :invalid_config, line: 2}} =
             KuraGate.new("{\"soakSeconds\": [60\n")

    assert {:error, %KuraGate.Error{code: :invalid_config}} =
             KuraGate.new(%{soak_seconds: {1, 2}})

    g = gate()
    {:ok, _, _} = KuraGate.tick(g, @good_tick)
    state = KuraGate.dump_state(g)

    assert {:error, %KuraGate.Error{code: :invalid_state}} =
             KuraGate.restore(%{}, binary_part(state, 0, 20))

    assert {:error, %KuraGate.Error{code: :invalid_state, message: message}} =
             KuraGate.restore(%{}, ~s({"attempt": 1, "latchd": null, "effectiveBaselines": {}}))

    assert message =~ "unknown field `latchd`"
    assert {:ok, _} = KuraGate.restore(%{}, state)
  end

  test "concurrent ticks on one gate are refused as busy, never corrupt or crash" do
    g = gate()
    {:ok, doc} = KuraGate.decode_json(@good_tick)

    results =
      1..16
      |> Enum.map(fn _ -> Task.async(fn -> for _ <- 1..200, do: KuraGate.tick(g, doc) end) end)
      |> Enum.flat_map(&Task.await(&1, 60_000))

    assert Enum.all?(results, fn
             {:ok, %{verdict: :soak}, _} -> true
             {:error, %KuraGate.Error{code: :busy}} -> true
             _ -> false
           end)

    assert {:ok, %{verdict: :soak}, _} = KuraGate.tick(g, doc)
  end

  test "large ticks go to a dirty CPU scheduler, small ones do not" do
    tick = good_map()
    [server] = tick["servers"]
    many = for i <- 1..1000, do: %{server | "id" => "s#{i}"}
    assert KuraGate.scheduler_for(tick) == :normal
    assert KuraGate.scheduler_for(%{tick | "servers" => many}) == :dirty_cpu
    assert KuraGate.scheduler_for(@good_tick) == :normal
    assert {:ok, %{verdict: :soak}, _} = KuraGate.tick(gate(), %{tick | "servers" => many})
  end

  test "repeated keys are refused, in JSON and in terms" do
    assert {:error, %KuraGate.Error{code: :invalid_input, line: 1} = e} =
             KuraGate.decode_json(~s({"a": 1, "b": {"c": 2, "c": 3}}))

    assert e.message =~ ~s(key "c" appears more than once)

    refused(
      gate(),
      String.replace(@good_tick, ~s("wave": 0,), ~s("wave": 0, "wave": 1,)),
      :invalid_input,
      [~s(key "wave" appears more than once)],
      true
    )

    # An atom key and a string key naming the same contract key.
    tick = good_map() |> Map.put(:wave_started_at, "2026-07-22T10:00:00Z")

    refused(gate(), tick, :invalid_input, [~s(key "waveStartedAt" given more than once)])
  end

  test "healthy_since keeps the gate's nanoseconds and goes back in exactly" do
    ns = "2026-07-21T10:00:00.123456789Z"
    doc = ~s({"now": "#{ns}", "wave": 0, "waveStartedAt": "#{ns}", "attempt": 1, "servers": []})
    g = gate()
    assert {:ok, %{verdict: :pass, healthy_since: ^ns}, _} = KuraGate.tick(g, doc)

    # The same instant back in as terms, through the map path.
    {:ok, tick} = KuraGate.decode_json(doc)
    assert {:ok, %{healthy_since: ^ns}, _} = KuraGate.tick(gate(), tick)

    # A DateTime in is its exact instant out.
    at = ~U[2026-07-21 10:00:00.654321Z]
    tick = %{now: at, wave: 0, wave_started_at: at, attempt: 1, servers: []}
    assert {:ok, %{healthy_since: since}, _} = KuraGate.tick(gate(), tick)
    assert since == "2026-07-21T10:00:00.654321Z"
    assert {:ok, ^at, 0} = DateTime.from_iso8601(since)
  end

  test "a year before 0 is an answer, not a MatchError" do
    text = "-000001-01-01T00:00:00Z"

    doc =
      ~s({"now": "#{text}", "wave": 0, "waveStartedAt": "#{text}", "attempt": 1, "servers": []})

    assert {:ok, %{verdict: :pass, healthy_since: ^text}, _} = KuraGate.tick(gate(), doc)

    at = DateTime.new!(Date.new!(-1, 1, 1), ~T[00:00:00], "Etc/UTC")
    tick = %{now: at, wave: 0, wave_started_at: at, attempt: 1, servers: []}
    assert {:ok, %{verdict: :pass, healthy_since: ^text}, _} = KuraGate.tick(gate(), tick)

    g = gate()
    assert {:ok, %{captured_at: ^text}} = KuraGate.capture_baseline(g, at, nil)

    assert {:ok, %{captured_at: %DateTime{}}} =
             KuraGate.capture_baseline(g, ~U[2026-07-21 10:00:00Z], nil)
  end

  test "terms nest as deep as JSON documents, and no deeper" do
    g = gate()

    for depth <- [120, 126, 127, 128, 129, 200] do
      # `servers` holds depth - 1 nested lists: depth containers in all.
      inner = depth - 2

      json =
        ~s({"servers": ) <>
          String.duplicate("[", inner + 1) <> String.duplicate("]", inner + 1) <> "}"

      term = %{"servers" => nest(inner, [])}

      {:error, from_json} = KuraGate.tick(g, json)
      {:error, from_term} = KuraGate.tick(g, term)
      json_deep = from_json.message =~ "recursion limit"
      term_deep = from_term.message =~ "nested 128 levels deep"
      assert json_deep == term_deep, "depth #{depth}: #{from_json.message} / #{from_term.message}"
      assert json_deep == depth >= 128, "depth #{depth}: #{from_json.message}"
    end
  end
end
