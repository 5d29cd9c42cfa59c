"""[MetaReg] published numbers (Wang & Golebiowski, "Towards Unbiased Calibration using
Meta-Regularization", TMLR 2024), transcribed from the paper's Table 1 (CIFAR-10 / CIFAR-100,
ResNet-18) and the Table 2 "FLγ" (γ-Net without SECE) rows (methods §6.5). Each cell
``mean±std`` over 5 seeds; Error, ECE, MCE, ACE in %, NLL raw, classwise ECE x100 -- the units
of our Table 1 analogue. Printed beside our CIFAR runs, never compared as if they were the
same experiment.
"""

from __future__ import annotations

COLUMNS = ("error", "nll", "ece", "mce", "adaece", "classwise_ece")
ROWS = (
    "ce",
    "ce-ts",
    "focal-1",
    "flsd53",
    "ls-0.05",
    "ls-0.1",
    "mixup-1",
    "mmce",
    "ce-dece",
    "ce-sece",
    "flg-dece",
    "flg-sece",
)
"""Table 1's rows in its order, by our method names (``ce-ts``: CE after temperature
scaling, our CE run's ``_ts`` metrics)."""

_TABLE1 = """
cifar10 4.812±0.122 0.335±0.01 4.056±0.092 33.932±5.433 4.022±0.136 0.848±0.023
cifar10 4.812±0.122 0.211±0.005 3.083±0.140 26.695±2.959 3.046±0.157 0.656±0.022
cifar10 4.874±0.100 0.207±0.005 3.193±0.104 28.034±5.702 3.174±0.098 0.690±0.018
cifar10 4.916±0.074 0.211±0.005 6.904±0.462 19.246±11.071 6.805±0.446 1.465±0.088
cifar10 4.744±0.126 0.232±0.003 2.900±0.085 24.860±8.599 3.985±0.154 0.727±0.009
cifar10 4.918±0.085 0.266±0.004 7.566±0.41 16.033±3.783 7.611±0.161 1.637±0.056
cifar10 4.126±0.068 0.273±0.033 12.863±3.2 20.739±4.205 12.833±3.161 2.678±0.615
cifar10 4.808±0.082 0.333±0.012 4.027±0.082 41.647±10.275 4.013±0.091 0.845±0.014
cifar10 5.194±0.161 0.301±0.038 4.106±0.402 41.346±13.325 4.088±0.395 0.868±0.074
cifar10 5.222±0.168 0.289±0.027 4.062±0.241 50.81±21.705 4.049±0.251 0.852±0.040
cifar10 5.434±0.095 0.193±0.009 2.257±0.787 56.633±23.856 2.396±0.669 0.557±0.165
cifar10 5.428±0.144 0.193±0.010 2.138±0.819 22.725±5.756 2.357±0.541 0.556±0.165
cifar100 22.570±0.438 0.997±0.014 8.380±0.336 23.250±2.436 8.347±0.344 0.233±0.006
cifar100 22.570±0.438 0.959±0.008 5.388±0.393 13.454±2.377 5.360±0.315 0.208±0.003
cifar100 22.498±0.214 0.900±0.007 5.044±0.203 12.454±0.893 5.015±0.207 0.203±0.004
cifar100 22.656±0.113 0.876±0.005 5.956±0.804 14.716±1.387 5.958±0.802 0.241±0.008
cifar100 21.810±0.172 1.070±0.011 8.108±0.346 20.268±1.536 8.106±0.346 0.272±0.006
cifar100 22.244±0.155 1.052±0.011 4.754±0.709 17.228±0.923 4.777±0.647 0.239±0.004
cifar100 21.210±0.227 0.917±0.017 9.716±0.754 16.01±1.335 9.722±0.74 0.315±0.011
cifar100 22.490±0.143 1.021±0.007 8.713±0.245 23.565±1.141 8.670±0.305 0.238±0.004
cifar100 23.406±0.323 1.148±0.006 7.309±0.245 22.565±1.446 7.253±0.315 0.241±0.002
cifar100 23.448±0.302 1.153±0.015 7.668±0.330 24.261±1.614 7.609±0.295 0.244±0.002
cifar100 23.712±0.204 0.888±0.009 1.879±0.440 8.271±2.651 1.838±0.371 0.195±0.005
cifar100 23.686±0.377 0.877±0.004 1.940±0.365 7.480±1.867 1.939±0.379 0.192±0.006
"""

_TABLE2_FLG = """
cifar10 5.632±0.118 0.197±0.009 2.177±0.619 46.172±28.24 2.319±0.407 0.553±0.12
cifar100 28.148±8.127 1.051±0.278 3.044±1.542 10.082±3.441 3.016±1.511 0.226±0.063
"""


def _parse(table: str, rows: tuple[str, ...]) -> dict[tuple[str, str], dict[str, str]]:
    """``(dataset, method) -> {column: "mean±std"}``; each dataset's lines in ``rows`` order."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    seen: dict[str, int] = {}
    for line in table.strip().splitlines():
        dataset, *cells = line.split()
        index = seen.get(dataset, 0)
        seen[dataset] = index + 1
        out[(dataset, rows[index])] = dict(zip(COLUMNS, cells, strict=True))
    if any(n != len(rows) for n in seen.values()):
        raise ValueError("a published table has the wrong number of rows")
    return out


TABLE1 = _parse(_TABLE1, ROWS)
"""``(dataset, method) -> {column: "mean±std"}``, [MetaReg] Table 1 (ResNet-18)."""
TABLE2 = {
    **_parse(_TABLE2_FLG, ("flg",)),
    **{k: v for k, v in TABLE1.items() if k[1] == "flg-sece"},
}
"""[MetaReg] Table 2 "SECE gain": FLγ (γ-Net without SECE) and FLγ-SECE (= Table 1's row)."""
