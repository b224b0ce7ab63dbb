defmodule Mix.Tasks.Compile.KuraGateNif do
  @moduledoc """
  Builds the NIF crate (`kura-gate-nif`, a member of the Cargo workspace at
  the repository root) with cargo and copies it to `priv/kura_gate_nif.so`.

  `CARGO_TARGET_DIR` is honoured; `KURA_GATE_NIF_PROFILE=release` builds the
  release profile (default: the dev profile, which shares its build with
  `cargo test`). No Hex package is involved.
  """
  use Mix.Task.Compiler

  @impl true
  def run(_args) do
    root = Path.expand("../..", __DIR__)
    profile = System.get_env("KURA_GATE_NIF_PROFILE", "debug")
    flags = if profile == "release", do: ["--release"], else: []
    target = System.get_env("CARGO_TARGET_DIR") || Path.join(root, "target")

    {_, status} =
      System.cmd("cargo", ["build", "--quiet", "-p", "kura-gate-nif" | flags],
        cd: root,
        into: IO.stream(:stdio, :line),
        stderr_to_stdout: true
      )

    if status != 0, do: Mix.raise("cargo build -p kura-gate-nif failed (exit #{status})")

    source = Path.join([target, profile, "libkura_gate_nif.so"])
    priv = Path.join(Mix.Project.app_path(), "priv")
    File.mkdir_p!(priv)
    dest = Path.join(priv, "kura_gate_nif.so")

    if File.read(source) != File.read(dest) do
      File.cp!(source, dest)
      {:ok, []}
    else
      {:noop, []}
    end
  end
end

defmodule KuraGate.MixProject do
  use Mix.Project

  def project do
    [
      app: :kura_gate,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      compilers: [:kura_gate_nif] ++ Mix.compilers(),
      deps: []
    ]
  end

  def application do
    [extra_applications: []]
  end
end
