defmodule KuraGate.DocTest do
  use ExUnit.Case, async: true
  doctest KuraGate
end
