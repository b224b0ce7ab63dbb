defmodule KuraGate.IdentityTest do
  # Every scenario and generated timeline, tick by tick through the NIF,
  # gives exactly the verdicts of `kura-gate replay` (JSON form, evidence
  # order included); a refused document is refused at the same tick,
  # naming the same field; dump and restore mid-timeline change nothing.
  use ExUnit.Case, async: true
  import KuraGate.TestSupport

  @moduletag timeout: 600_000

  defp same_refusal!(path, where, error, message) do
    assert %KuraGate.Error{field: field} = error, "#{path} #{where}: #{inspect(error)}"

    assert field != nil and String.contains?(message, "field #{field}"),
           "#{path} #{where}: binding #{inspect(error)}, replay #{message}"
  end

  defp bad_tick(message) do
    case Regex.run(~r/^tick (\d+), /, message) do
      [_, n] -> String.to_integer(n)
      nil -> nil
    end
  end

  # One document's ticks through the binding against replay's answer.
  defp judge(form, path, {config, doc_ticks}, want, {ticks, refused}) do
    case {KuraGate.new(config), want} do
      {{:error, error}, {:error, message}} ->
        same_refusal!(path, "config", error, message)
        {ticks, refused + 1}

      {{:ok, gate}, _} ->
        bad = with {:error, message} <- want, do: bad_tick(message)
        bad = if is_integer(bad), do: bad, else: -1

        doc_ticks
        |> Enum.with_index()
        |> Enum.reduce_while({ticks, refused}, fn {tick, i}, {t, r} ->
          input =
            if form == :binary,
              do: elem(KuraGate.encode_json(tick), 1),
              else: tick

          case {KuraGate.tick(gate, input), want} do
            {{:error, error}, {:error, message}} when i == bad ->
              same_refusal!(path, "tick #{i}", error, message)
              {:halt, {t, r + 1}}

            {{:ok, _verdict, _}, {:error, _}} ->
              {:cont, {t, r}}

            {{:ok, verdict, _}, {:ok, lines}} ->
              assert json_form(verdict) == Enum.at(lines, i),
                     "#{path} tick #{i}: #{inspect(verdict)}"

              {:cont, {t + 1, r}}

            {other, _} ->
              flunk("#{path} tick #{i}: #{inspect(other)} vs #{inspect(want)}")
          end
        end)

      {other, _} ->
        flunk("#{path}: #{inspect(other)} vs #{inspect(want)}")
    end
  end

  # Runs the ticks as maps (string keys, as decoded) and as JSON binaries.
  for form <- [:map, :binary] do
    test "verdicts are the replay verdicts (ticks as #{form})" do
      {scenarios, timelines} = documents()

      totals =
        for path <- scenarios ++ timelines, reduce: {0, 0} do
          {ticks, refused} ->
            want = replay(path)

            case read(path) do
              # A document the strict reader refuses as a whole (a repeated
              # key): replay refuses it at the same place.
              {:error, %KuraGate.Error{line: line, column: column} = error} ->
                assert {:error, message} = want, "#{path}: #{inspect(error)}"

                assert String.starts_with?(message, "line #{line} column #{column}: "),
                       "#{path}: binding #{inspect(error)}, replay #{message}"

                {ticks, refused + 1}

              {:ok, loaded} ->
                judge(unquote(form), path, loaded, want, {ticks, refused})
            end
        end

      {ticks, refused} = totals

      IO.puts(
        "\n[elixir identity, #{unquote(form)}] #{length(scenarios)} scenarios + #{length(timelines)} timelines: #{ticks} ticks identical, #{refused} refusals at the same tick and field"
      )

      assert ticks > 1000
    end
  end

  test "dump and restore mid-timeline continue exactly" do
    {scenarios, timelines} = documents()

    restores =
      for path <- scenarios ++ timelines, reduce: 0 do
        acc ->
          case replay(path) do
            {:error, _} ->
              acc

            {:ok, lines} ->
              {config, ticks} = load(path)
              n = length(ticks)

              cuts =
                if String.contains?(path, "testdata/gate"),
                  do: Enum.to_list(1..(n - 1)//1),
                  else: Enum.uniq([div(n, 3), div(2 * n, 3)])

              for k <- cuts, reduce: acc do
                acc ->
                  {:ok, first} = KuraGate.new(config)
                  for t <- Enum.take(ticks, k), do: {:ok, _, _} = KuraGate.tick(first, t)
                  state = KuraGate.dump_state(first)
                  {:ok, second} = KuraGate.restore(config, state)

                  ticks
                  |> Enum.drop(k)
                  |> Enum.with_index(k)
                  |> Enum.each(fn {t, i} ->
                    {:ok, verdict, _} = KuraGate.tick(second, t)

                    assert json_form(verdict) == Enum.at(lines, i),
                           "#{path} restored at #{k}, tick #{i}"
                  end)

                  acc + 1
              end
          end
      end

    IO.puts("\n[elixir restore] #{restores} restores continued identically")
    assert restores > 300
  end
end
