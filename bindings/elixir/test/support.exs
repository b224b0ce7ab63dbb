defmodule KuraGate.TestSupport do
  @moduledoc false
  # Replay documents, `kura-gate replay` runs and the verdict's JSON form.

  @testdata Path.expand("../../../testdata/gate", __DIR__)

  def documents do
    scenarios =
      Path.wildcard(Path.join(@testdata, "*.json"))
      |> Enum.reject(&String.ends_with?(&1, ".expected.json"))

    if length(scenarios) < 20, do: raise("only #{length(scenarios)} scenarios")

    dir =
      System.get_env("KURA_GATE_TIMELINES") ||
        raise "KURA_GATE_TIMELINES is not set: run scripts/bindings-check.sh"

    timelines = Path.wildcard(Path.join(dir, "*.json")) |> Enum.sort()
    if timelines == [], do: raise("no timelines in #{dir}")
    {scenarios, timelines}
  end

  @doc "{:ok, [verdict_json_map]} or {:error, message}, from the binary."
  def replay(path) do
    bin =
      System.get_env("KURA_GATE_BIN") ||
        raise "KURA_GATE_BIN is not set: run scripts/bindings-check.sh"

    case System.cmd(bin, ["replay", path], stderr_to_stdout: true) do
      {out, 0} ->
        lines =
          out
          |> String.split("\n", trim: true)
          |> Enum.with_index()
          |> Enum.map(fn {line, i} ->
            {:ok, %{"tick" => ^i} = v} = KuraGate.decode_json(line)
            Map.delete(v, "tick")
          end)

        {:ok, lines}

      {out, 2} ->
        {:error, String.trim(out)}
    end
  end

  def load(path) do
    {:ok, loaded} = read(path)
    loaded
  end

  @doc "{:ok, {config, ticks}}, or {:error, error} for a document decode_json refuses."
  def read(path) do
    # kura-gate replay skips a leading byte-order mark (byte-order-mark.json).
    text = path |> File.read!() |> String.trim_leading("\uFEFF")

    with {:ok, doc} <- KuraGate.decode_json(text) do
      {:ok, {Map.get(doc, "config"), Map.fetch!(doc, "ticks")}}
    end
  end

  @doc "A verdict as the binding returns it, in its JSON form (as replay prints it)."
  def json_form(verdict) do
    %{
      "verdict" => Atom.to_string(verdict.verdict),
      "signal" => verdict.signal && Atom.to_string(verdict.signal),
      "serverId" => verdict.server_id,
      "healthySince" => verdict.healthy_since,
      "remainingSeconds" => verdict.remaining_seconds,
      "evidence" => Enum.map(verdict.evidence, &evidence_form/1)
    }
  end

  defp evidence_form(e) do
    form = %{
      "server" => e.server,
      "signal" => Atom.to_string(e.signal),
      "observed" => e.observed,
      "bandTop" => e.band_top,
      "baseline" => e.baseline
    }

    form = if e.detail == nil, do: form, else: Map.put(form, "detail", e.detail)

    form =
      case e.fence do
        nil ->
          form

        f ->
          Map.put(form, "fence", %{
            "phase" => f.phase,
            "enabledPods" => f.enabled_pods,
            "validWriters" => f.valid_writers,
            "epoch" => f.epoch
          })
      end

    form =
      case e.run do
        nil -> form
        r -> Map.put(form, "run", %{"since" => r.since, "level" => r.level})
      end

    case e.update_paused do
      nil ->
        form

      p ->
        pause =
          [
            {"strategy", p.strategy},
            {"partition", p.partition},
            {"templateImage", p.template_image},
            {"heldPods", if(p.held_pods == [], do: nil, else: p.held_pods)}
          ]
          |> Enum.reject(fn {_, v} -> v == nil end)
          |> Map.new()

        Map.put(form, "updatePaused", pause)
    end
  end

  def rss_kib do
    "/proc/self/status"
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_value(fn line ->
      case String.split(line) do
        ["VmRSS:", kib, "kB"] -> String.to_integer(kib)
        _ -> nil
      end
    end)
  end
end
