defmodule KuraGate.LibraryTest do
  use ExUnit.Case, async: true

  test "signals and verdict kinds come from the library" do
    d = KuraGate.describe()
    assert d["abiVersion"] == 2
    assert KuraGate.signals() == Enum.map(d["signals"], &String.to_atom/1)
    assert :soaking in KuraGate.signals() and :wave_deadline_exceeded in KuraGate.signals()
    assert d["verdicts"] == ["pass", "soak", "hard_stop"]
    assert d["defaultConfig"]["soakSeconds"] == [900, 300]
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
