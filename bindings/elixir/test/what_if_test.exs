defmodule KuraGate.WhatIfTest do
  # The what-if through the NIF is exactly `kura-gate replay --gate-config
  # FILE --diff [--agent-view]`, for the scenarios, the exported timelines
  # of testdata/timeline and 40 generated timelines, against three
  # candidates, in both views; what replay refuses, the NIF refuses.
  use ExUnit.Case, async: true
  import KuraGate.TestSupport

  @moduletag timeout: 600_000
  @exported Path.expand("../../../testdata/timeline", __DIR__)

  defp candidates do
    [
      File.read!(Path.join(@exported, "looser-outbox.gate.json")),
      ~s({"soakSeconds": [60], "fdTimeoutBand": 2}),
      "{}"
    ]
  end

  defp diff(path, candidate_path, agent_view) do
    args = ["replay", "--gate-config", candidate_path, "--diff"]
    args = if agent_view, do: args ++ ["--agent-view"], else: args

    case System.cmd(System.fetch_env!("KURA_GATE_BIN"), args ++ [path], stderr_to_stdout: true) do
      {_, 2} ->
        :refused

      {out, code} when code in [0, 1] ->
        lines =
          out
          |> String.split("\n", trim: true)
          |> Enum.map(fn line ->
            {:ok, v} = KuraGate.decode_json(line)
            v
          end)

        {differences, [%{"summary" => summary}]} = Enum.split(lines, -1)
        {:ok, %{"differences" => differences, "summary" => summary}}
    end
  end

  test "what-if answers are replay's --diff answers" do
    {scenarios, timelines} = documents()

    exported =
      Path.wildcard(Path.join(@exported, "*.json"))
      |> Enum.reject(&String.ends_with?(&1, ".gate.json"))

    docs = scenarios ++ Enum.take(timelines, 40) ++ exported
    dir = System.tmp_dir!() |> Path.join("kura-what-if-#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    candidate_path = Path.join(dir, "candidate.json")

    {compared, differing, refused} =
      for candidate <- candidates(),
          path <- docs,
          agent_view <- [false, true],
          reduce: {0, 0, 0} do
        {c, d, r} ->
          File.write!(candidate_path, candidate)
          document = path |> File.read!()

          case {diff(path, candidate_path, agent_view),
                KuraGate.what_if(document, candidate, agent_view: agent_view)} do
            {:refused, {:error, %KuraGate.Error{}}} ->
              {c, d, r + 1}

            {{:ok, want}, {:ok, got}} ->
              assert got == want, "#{path} (agent view #{agent_view}): #{inspect(got)}"
              d = if want["differences"] == [], do: d, else: d + 1
              {c + 1, d, r}

            {want, got} ->
              flunk("#{path}: replay #{inspect(want)}, NIF #{inspect(got)}")
          end
      end

    File.rm_rf!(dir)

    IO.puts(
      "\n[elixir what-if] #{compared} identical (#{differing} differing), #{refused} refused by both"
    )

    assert differing > 0
  end

  test "a refused candidate is an invalid config naming the key" do
    doc = File.read!(Path.join(@exported, "holds.json"))

    assert {:error, %KuraGate.Error{code: :invalid_config, field: "config.outboxBandPercent"}} =
             KuraGate.what_if(doc, %{outbox_band_percent: 5000})
  end
end
