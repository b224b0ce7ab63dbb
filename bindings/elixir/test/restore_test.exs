defmodule KuraGate.RestoreTest do
  # testdata/gate-restore/cases.json: stored states met by one tick, the
  # same cases the C ABI (gate/ffi/tests/abi.rs) and Go (restore_test.go)
  # run. The rule lives in the gate; the NIF passes it through.
  use ExUnit.Case, async: true
  import KuraGate.TestSupport

  @cases Path.expand("../../../testdata/gate-restore/cases.json", __DIR__)

  test "restored states are validated against the tick they meet" do
    {:ok, doc} = @cases |> File.read!() |> KuraGate.decode_json()
    cases = doc["cases"]
    assert length(cases) >= 10

    wrong =
      for c <- cases, reduce: [] do
        wrong ->
          {:ok, state} = KuraGate.encode_json(c["state"])

          got =
            case KuraGate.restore(doc["config"], state) do
              {:error, %KuraGate.Error{code: code, field: field}} ->
                %{"code" => Atom.to_string(code), "field" => field}

              {:ok, gate} ->
                {:ok, verdict, _} = KuraGate.tick(gate, c["tick"])
                %{"verdict" => json_form(verdict)}
            end

          if got == c["expect"],
            do: wrong,
            else: [
              "#{c["name"]}:\n  got  #{inspect(got)}\n  want #{inspect(c["expect"])}" | wrong
            ]
      end

    assert wrong == [], "#{length(wrong)} of #{length(cases)} differ:\n" <> Enum.join(wrong, "\n")
  end
end
