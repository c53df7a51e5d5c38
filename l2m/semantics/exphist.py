"""Prometheus native histograms (exponential buckets), the arithmetic only (issue 56).

Input: observed doubles, or histograms already built. Output: bucket indexes, sparse histograms
(:class:`NativeHistogram`), their exact merge and resolution limit, the span/delta form remote
write's ``Histogram`` message carries, and quantile estimates for per-minute quantile gauges.

Every definition follows Prometheus bit for bit, read from its sources (cited, not copied):

* bucket of a value: client_golang ``prometheus/histogram.go`` (``histogramCounts.observe``):
  ``math.Frexp`` of |v|; for schema > 0 a binary search of the fraction in a table of bounds,
  for schema <= 0 the exponent alone. Bucket ``i`` holds (base^(i-1), base^i], base =
  2^(2^-schema); |v| <= the zero threshold is the zero bucket; ±Inf go one bucket past the
  bucket of ±MaxFloat64; NaN is counted in ``count`` (and makes ``sum`` NaN) but is in no
  bucket (client_golang ``histogram.observe``: "Do not add to sparse buckets for NaN").
* bucket bounds: prometheus ``model/histogram/generic.go`` (``getBoundExponential``), the same
  table as client_golang's ``nativeHistogramBounds``. The table is not 2^(j/2^s)/2 correctly
  rounded (341 of its 511 entries differ from it, by up to 4 ulps, nearly all below), so it
  is kept here as data: a value equal to an entry belongs to the lower bucket, as in
  Prometheus.
* schema reduction: prometheus ``model/histogram/float_histogram.go`` (``targetIdx``) and
  client_golang ``doubleBucketWidth``: bucket ``i`` at schema ``s`` lies in bucket
  ``((i - 1) >> (s - t)) + 1`` = ceil(i / 2^(s-t)) at schema ``t`` < ``s``. Every bound of
  schema t is a bound of schema s (the table's rows nest), so the reduction is exact.
* spans and deltas: client_golang ``makeBuckets``: a gap of one or two empty buckets stays
  inside the span as zero counts, a longer gap starts a new span.

Pure Python, so the engine's vectorised index (:mod:`l2m.engine.nativebuckets`), the tests and
any reference evaluator agree on one definition."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

SCHEMA_MIN = -4
SCHEMA_MAX = 8
# client_golang's DefNativeHistogramZeroThreshold: 2^-128.
DEFAULT_ZERO_THRESHOLD = 2.938735877055719e-39
_MAX_FLOAT = 1.7976931348623157e308  # math.nextafter(math.inf, 0)
_MAX_EXPONENT = 1024  # math.frexp(MaxFloat64) == (0.9999999999999999, 1024)

# Bucket bounds in [0.5, 1) by schema: entry j of schema s is the fraction of the upper bound
# of every bucket i with i mod 2^s == j. Values of prometheus model/histogram/generic.go
# (exponentialBounds) = client_golang prometheus/histogram.go (nativeHistogramBounds).
_SCHEMA_8_BOUNDS: tuple[float, ...] = (
    0.5, 0.5013556375251013, 0.5027149505564014, 0.5040779490592088, 0.5054446430258502,
    0.5068150424757447, 0.5081891574554764, 0.509566998038869, 0.5109485743270583,
    0.5123338964485679, 0.5137229745593818, 0.5151158188430205, 0.5165124395106142,
    0.5179128468009786, 0.5193170509806894, 0.520725062344158, 0.5221368912137069,
    0.5235525479396449, 0.5249720429003435, 0.526395386502313, 0.5278225891802786,
    0.5292536613972564, 0.5306886136446309, 0.5321274564422321, 0.5335702003384117,
    0.5350168559101208, 0.5364674337629877, 0.5379219445313954, 0.5393803988785598,
    0.5408428074966075, 0.5423091811066545, 0.5437795304588847, 0.5452538663326288,
    0.5467321995364429, 0.5482145409081883, 0.549700901315111, 0.5511912916539204,
    0.5526857228508706, 0.5541842058618393, 0.5556867516724088, 0.5571933712979462,
    0.5587040757836845, 0.5602188762048033, 0.5617377836665098, 0.5632608093041209,
    0.564787964283144, 0.5663192597993595, 0.5678547070789026, 0.5693943173783458,
    0.5709381019847808, 0.572486072215902, 0.5740382394200894, 0.5755946149764913,
    0.5771552102951081, 0.5787200368168754, 0.5802891060137493, 0.5818624293887887,
    0.5834400184762408, 0.585021884841625, 0.5866080400818185, 0.5881984958251406,
    0.5897932637314379, 0.5913923554921704, 0.5929957828304968, 0.5946035575013605,
    0.5962156912915756, 0.5978321960199137, 0.5994530835371903, 0.6010783657263515,
    0.6027080545025619, 0.6043421618132907, 0.6059806996384005, 0.6076236799902344,
    0.6092711149137041, 0.6109230164863786, 0.6125793968185725, 0.6142402680534349,
    0.6159056423670379, 0.6175755319684665, 0.6192499490999082, 0.620928906036742,
    0.622612415087629, 0.6243004885946023, 0.6259931389331581, 0.6276903785123455,
    0.6293922197748583, 0.6310986751971253, 0.6328097572894031, 0.6345254785958666,
    0.6362458516947014, 0.637970889198196, 0.6397006037528346, 0.6414350080393891,
    0.6431741147730128, 0.6449179367033329, 0.6466664866145447, 0.6484197773255048,
    0.6501778216898253, 0.6519406325959679, 0.6537082229673385, 0.6554806057623822,
    0.6572577939746774, 0.659039800633032, 0.6608266388015788, 0.6626183215798706,
    0.6644148621029772, 0.6662162735415805, 0.6680225691020727, 0.6698337620266515,
    0.6716498655934177, 0.6734708931164728, 0.6752968579460171, 0.6771277734684463,
    0.6789636531064505, 0.6808045103191123, 0.6826503586020058, 0.6845012114872953,
    0.6863570825438342, 0.688217985377265, 0.690083933630119, 0.6919549409819159,
    0.6938310211492645, 0.6957121878859629, 0.6975984549830999, 0.6994898362691555,
    0.7013863456101023, 0.7032879969095076, 0.7051948041086352, 0.7071067811865475,
    0.7090239421602076, 0.7109463010845827, 0.7128738720527471, 0.7148066691959849,
    0.7167447066838943, 0.718687998724491, 0.7206365595643126, 0.7225904034885232,
    0.7245495448210174, 0.7265139979245261, 0.7284837772007218, 0.7304588970903234,
    0.7324393720732029, 0.7344252166684908, 0.7364164454346837, 0.7384130729697496,
    0.7404151139112358, 0.7424225829363761, 0.7444354947621984, 0.7464538641456323,
    0.7484777058836176, 0.7505070348132126, 0.7525418658117031, 0.7545822137967112,
    0.7566280937263048, 0.7586795205991071, 0.7607365094544071, 0.762799075372269,
    0.7648672334736434, 0.7669409989204777, 0.7690203869158282, 0.7711054127039704,
    0.7731960915705107, 0.7752924388424999, 0.7773944698885442, 0.7795022001189185,
    0.7816156449856788, 0.7837348199827764, 0.7858597406461707, 0.7879904225539431,
    0.7901268813264122, 0.7922691326262467, 0.7944171921585818, 0.7965710756711334,
    0.7987307989543135, 0.8008963778413465, 0.8030678282083853, 0.805245165974627,
    0.8074284071024302, 0.8096175675974316, 0.8118126635086642, 0.8140137109286738,
    0.8162207259936375, 0.8184337248834821, 0.820652723822003, 0.8228777390769823,
    0.8251087869603088, 0.8273458838280969, 0.8295890460808079, 0.8318382901633681,
    0.8340936325652911, 0.8363550898207981, 0.8386226785089391, 0.8408964152537144,
    0.8431763167241966, 0.8454623996346523, 0.8477546807446661, 0.8500531768592616,
    0.8523579048290255, 0.8546688815502312, 0.8569861239649629, 0.8593096490612387,
    0.8616394738731368, 0.8639756154809185, 0.8663180910111553, 0.8686669176368529,
    0.871022112577578, 0.8733836930995842, 0.8757516765159389, 0.8781260801866495,
    0.8805069215187917, 0.8828942179666361, 0.8852879870317771, 0.8876882462632604,
    0.890095013257712, 0.8925083056594671, 0.8949281411607002, 0.8973545375015533,
    0.8997875124702672, 0.9022270839033115, 0.9046732696855155, 0.9071260877501991,
    0.909585556079304, 0.9120516927035263, 0.9145245157024483, 0.9170040432046711,
    0.9194902933879467, 0.9219832844793128, 0.9244830347552253, 0.9269895625416926,
    0.92950288621441, 0.9320230241988943, 0.9345499949706191, 0.9370838170551498,
    0.93962450902828, 0.9421720895161669, 0.9447265771954693, 0.9472879907934827,
    0.9498563490882775, 0.9524316709088368, 0.9550139751351947, 0.9576032806985735,
    0.9601996065815236, 0.9628029718180622, 0.9654133954938133, 0.9680308967461471,
    0.9706554947643201, 0.9732872087896164, 0.9759260581154889, 0.9785720620876999,
    0.9812252401044634, 0.9838856116165875, 0.9865531961276168, 0.9892280131939752,
    0.9919100824251095, 0.9945994234836328, 0.9972960560854698,
)
# Every coarser schema's row is every 2^(8-s)-th entry of schema 8's, bit for bit (checked by
# tests/unit/semantics/test_exphist.py): the bounds nest, which makes schema reduction exact.
_FRACTION_BOUNDS: tuple[tuple[float, ...], ...] = tuple(
    _SCHEMA_8_BOUNDS[::1 << (SCHEMA_MAX - schema)] for schema in range(SCHEMA_MAX + 1))

POSITIVE = 1
NEGATIVE = -1
ZERO = 0


def fraction_bounds() -> tuple[tuple[float, ...], ...]:
    """Prometheus's table of bucket bounds in [0.5, 1), by schema 0..8 (see above)."""
    return _FRACTION_BOUNDS


def check_schema(schema: int) -> None:
    """Refuse a schema Prometheus has no exponential buckets for (−4..8)."""
    if isinstance(schema, bool) or not isinstance(schema, int) \
            or not SCHEMA_MIN <= schema <= SCHEMA_MAX:
        raise ValueError(f"native histogram schema must be an integer from {SCHEMA_MIN} to "
                         f"{SCHEMA_MAX}, not {schema!r}")


def check_zero_threshold(zero_threshold: float) -> None:
    """Refuse a zero threshold that is negative, infinite or NaN."""
    if not (isinstance(zero_threshold, int | float) and math.isfinite(zero_threshold)
            and zero_threshold >= 0):
        raise ValueError(f"native histogram zero threshold must be a finite number >= 0, "
                         f"not {zero_threshold!r}")


def growth_factor(schema: int) -> float:
    """The ratio of a bucket's upper bound to its lower bound: 2^(2^-schema)."""
    check_schema(schema)
    return float(2.0 ** (2.0 ** -schema))


def relative_error_bound(schema: int) -> float:
    """The largest relative error of :func:`representative` for any value of its bucket:
    (base − 1) / (base + 1), plus under 1e-15 from the rounding of Prometheus's bounds and of
    the estimate; for |v| >= 2^-1022 (smaller values' bounds are not all doubles)."""
    base = growth_factor(schema)
    return (base - 1.0) / (base + 1.0)


def magnitude_index(magnitude: float, schema: int) -> int:
    """The index of the bucket holding |magnitude| at ``schema`` (nonzero, not NaN: zero and
    NaN have no bucket index; see :func:`bucket_of`). ±Inf is one bucket past ±MaxFloat64,
    as in client_golang's ``histogramCounts.observe``."""
    a = abs(magnitude)
    infinite = math.isinf(a)
    if infinite:
        a = _MAX_FLOAT
    fraction, exponent = math.frexp(a)
    if schema > 0:
        bounds = _FRACTION_BOUNDS[schema]
        # bisect_left is Go's sort.SearchFloat64s: a fraction equal to a bound belongs to
        # that bound's bucket (upper bounds are inclusive).
        key = bisect_left(bounds, fraction) + (exponent - 1) * len(bounds)
    else:
        # An exact power of two is the upper bound of the bucket below.
        key = exponent - 1 if fraction == 0.5 else exponent
        shift = -schema
        key = (key + (1 << shift) - 1) >> shift  # ceil(key / 2^shift), also below zero
    return key + 1 if infinite else key


def bucket_of(value: float, schema: int,
              zero_threshold: float = DEFAULT_ZERO_THRESHOLD) -> tuple[int, int] | None:
    """Where ``value`` is counted: ``(POSITIVE, i)``, ``(NEGATIVE, i)`` (the bucket of |v|),
    ``(ZERO, 0)`` for |v| <= ``zero_threshold``, or ``None`` for NaN (counted in the count
    and the sum only)."""
    if math.isnan(value):
        return None
    # client_golang compares ±Inf as ±MaxFloat64 with the threshold.
    v = max(-_MAX_FLOAT, min(_MAX_FLOAT, value))
    if v > zero_threshold:
        return POSITIVE, magnitude_index(value, schema)
    if v < -zero_threshold:
        return NEGATIVE, magnitude_index(value, schema)
    return ZERO, 0


def _ldexp(fraction: float, exponent: int) -> float:
    try:
        return math.ldexp(fraction, exponent)
    except OverflowError:  # Go's math.Ldexp returns +Inf
        return math.inf


def upper_bound(index: int, schema: int) -> float:
    """The upper bound of positive bucket ``index`` (prometheus ``getBoundExponential``):
    base^index, from the table; MaxFloat64 for the last finite bucket, +Inf past it."""
    if schema < 0:
        exponent = index << -schema
        if exponent == _MAX_EXPONENT:
            return _MAX_FLOAT
        return _ldexp(1.0, exponent)
    fraction = _FRACTION_BOUNDS[schema][index & ((1 << schema) - 1)]
    exponent = (index >> schema) + 1
    if fraction == 0.5 and exponent == _MAX_EXPONENT + 1:
        return _MAX_FLOAT
    return _ldexp(fraction, exponent)


def representative(index: int, schema: int) -> float:
    """The estimate of a positive value known to lie in bucket ``index``: the harmonic mean
    2·L·U/(L+U) of its bounds, whose worst relative error, (base − 1)/(base + 1), is the same
    at both ends and so the smallest any single estimate has. +Inf for the ±Inf bucket."""
    upper = upper_bound(index, schema)
    lower = upper_bound(index - 1, schema)
    if math.isinf(upper) or lower == 0.0:
        # Past MaxFloat64 only ±Inf is counted; below the smallest subnormal only its
        # upper bound is a double.
        return upper
    # Written so that neither 2·L nor L·U can overflow.
    return lower * (2.0 / (1.0 + lower / upper))



@dataclass
class NativeHistogram:
    """A sparse native histogram: the fields of Prometheus's integer ``Histogram``, buckets as
    index → count maps holding only nonzero counts. ``count`` includes NaN observations, which
    no bucket holds; ``sum`` is NaN once one is observed."""

    schema: int
    zero_threshold: float = DEFAULT_ZERO_THRESHOLD
    zero_count: int = 0
    count: int = 0
    sum: float = 0.0
    positive: dict[int, int] = field(default_factory=dict)
    negative: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_schema(self.schema)
        check_zero_threshold(self.zero_threshold)

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.count += 1
        self.sum += value
        where = bucket_of(value, self.schema, self.zero_threshold)
        if where is None:
            return
        sign, index = where
        if sign == ZERO:
            self.zero_count += 1
        else:
            buckets = self.positive if sign == POSITIVE else self.negative
            buckets[index] = buckets.get(index, 0) + 1

    def bucket_count(self) -> int:
        """Populated buckets, as client_golang counts them for its limit (zero bucket
        excluded)."""
        return len(self.positive) + len(self.negative)

    def copy(self) -> NativeHistogram:
        """An independent copy."""
        return NativeHistogram(self.schema, self.zero_threshold, self.zero_count, self.count,
                               self.sum, dict(self.positive), dict(self.negative))


def from_values(values: Iterable[float], schema: int,
                zero_threshold: float = DEFAULT_ZERO_THRESHOLD) -> NativeHistogram:
    """The histogram of ``values``."""
    histogram = NativeHistogram(schema, zero_threshold)
    for value in values:
        histogram.observe(value)
    return histogram


def target_index(index: int, schema: int, target: int) -> int:
    """The bucket at schema ``target`` <= ``schema`` that holds bucket ``index`` of
    ``schema``: ceil(index / 2^(schema − target)) (prometheus ``targetIdx``)."""
    return ((index - 1) >> (schema - target)) + 1


def _reduce(buckets: Mapping[int, int], schema: int, target: int) -> dict[int, int]:
    if target == schema:
        return dict(buckets)
    reduced: dict[int, int] = {}
    for index, count in buckets.items():
        key = target_index(index, schema, target)
        reduced[key] = reduced.get(key, 0) + count
    return reduced


def reduce_schema(histogram: NativeHistogram, schema: int) -> NativeHistogram:
    """``histogram`` at the coarser (or same) ``schema``: every bucket added into the one
    holding it. Exact: no observation changes side of a bound."""
    check_schema(schema)
    if schema > histogram.schema:
        raise ValueError(f"cannot raise a native histogram's schema from {histogram.schema} "
                         f"to {schema}")
    return NativeHistogram(schema, histogram.zero_threshold, histogram.zero_count,
                           histogram.count, histogram.sum,
                           _reduce(histogram.positive, histogram.schema, schema),
                           _reduce(histogram.negative, histogram.schema, schema))


def widen_zero_bucket(histogram: NativeHistogram, zero_threshold: float) -> NativeHistogram:
    """``histogram`` with a zero threshold of at least ``zero_threshold``: buckets whose lower
    bound is below it join the zero bucket; when a populated bucket straddles it, the
    threshold grows to that bucket's upper bound (prometheus FloatHistogram
    ``zeroCountForLargerThreshold``)."""
    check_zero_threshold(zero_threshold)
    threshold = max(zero_threshold, histogram.zero_threshold)
    if threshold == histogram.zero_threshold:
        return histogram.copy()
    zero_count = histogram.zero_count
    positive, negative = dict(histogram.positive), dict(histogram.negative)
    while True:
        moved = False
        for buckets in (positive, negative):
            for index in sorted(buckets):
                if upper_bound(index - 1, histogram.schema) >= threshold:
                    break
                zero_count += buckets.pop(index)
                moved = True
                threshold = max(threshold, upper_bound(index, histogram.schema))
        if not moved:
            break
    return NativeHistogram(histogram.schema, threshold, zero_count, histogram.count,
                           histogram.sum, positive, negative)


def _add(a: Mapping[int, int], b: Mapping[int, int]) -> dict[int, int]:
    total = dict(a)
    for index, count in b.items():
        total[index] = total.get(index, 0) + count
    return total


def merge(a: NativeHistogram, b: NativeHistogram) -> NativeHistogram:
    """The histogram of both histograms' observations: the finer schema reduced to the
    coarser, the narrower zero bucket widened to the wider one (and both to a straddled
    bucket's bound), counts added. Commutative and associative in everything but ``sum``,
    a float sum (its last bits follow the order of the additions)."""
    schema = min(a.schema, b.schema)
    a, b = reduce_schema(a, schema), reduce_schema(b, schema)
    threshold = max(a.zero_threshold, b.zero_threshold)
    while a.zero_threshold != b.zero_threshold or a.zero_threshold != threshold:
        a, b = widen_zero_bucket(a, threshold), widen_zero_bucket(b, threshold)
        threshold = max(a.zero_threshold, b.zero_threshold)
    return NativeHistogram(schema, threshold, a.zero_count + b.zero_count, a.count + b.count,
                           a.sum + b.sum, _add(a.positive, b.positive),
                           _add(a.negative, b.negative))


def limit_buckets(histogram: NativeHistogram, max_buckets: int) -> NativeHistogram:
    """``histogram`` at the highest schema, no finer than its own, whose populated buckets
    number at most ``max_buckets`` (0: no limit), or at schema −4 when none is (client_golang
    ``limitBuckets`` → ``doubleBucketWidth``, one schema step at a time; its zero-bucket
    widening and resets are not done). Depends on the observations only, so limiting
    partials before or after merging them gives the same histogram."""
    if max_buckets < 0:
        raise ValueError(f"max_buckets must be >= 0, not {max_buckets!r}")
    current = histogram.copy()
    while max_buckets and current.bucket_count() > max_buckets and current.schema > SCHEMA_MIN:
        current = reduce_schema(current, current.schema - 1)
    return current


Span = tuple[int, int]
"""(offset, length): ``offset`` empty buckets after the previous span (the first span's is
its first index), then ``length`` buckets."""


def encode_buckets(buckets: Mapping[int, int]) -> tuple[list[Span], list[int]]:
    """Spans and delta-encoded counts of one side's buckets, as remote write's integer
    ``Histogram`` carries them (``positive_spans``/``positive_deltas``): each count minus the
    one before (the first minus 0). Gaps of one or two buckets are kept inside a span as
    zero counts, longer gaps start a span (client_golang ``makeBuckets``)."""
    spans: list[list[int]] = []
    deltas: list[int] = []
    previous = 0
    next_index = 0
    for n, index in enumerate(sorted(k for k, c in buckets.items() if c)):
        gap = index - next_index
        if n == 0 or gap > 2:
            spans.append([gap, 0])
        else:
            for _ in range(gap):
                spans[-1][1] += 1
                deltas.append(-previous)
                previous = 0
        count = buckets[index]
        spans[-1][1] += 1
        deltas.append(count - previous)
        previous = count
        next_index = index + 1
    return [(offset, length) for offset, length in spans], deltas


def decode_buckets(spans: Iterable[Span], deltas: Iterable[int]) -> dict[int, int]:
    """The buckets :func:`encode_buckets` encoded (index → nonzero count). Refuses spans
    and deltas that disagree, a span after the first with a negative offset, or a negative
    count (prometheus ``checkHistogramSpans``/``checkHistogramBuckets``)."""
    values = list(deltas)
    buckets: dict[int, int] = {}
    position = 0
    index = 0
    count = 0
    for n, (offset, length) in enumerate(spans):
        if n and offset < 0:
            raise ValueError(f"span {n + 1} has a negative offset {offset}")
        if length < 0:
            raise ValueError(f"span {n + 1} has a negative length {length}")
        index += offset
        for _ in range(length):
            if position >= len(values):
                raise ValueError(f"spans need more than the {len(values)} counts given")
            count += values[position]
            position += 1
            if count < 0:
                raise ValueError(f"bucket {index} has a negative count {count}")
            if count:
                buckets[index] = count
            index += 1
    if position != len(values):
        raise ValueError(f"spans need {position} counts, {len(values)} given")
    return buckets


def nearest_rank(q: float, n: int) -> int:
    """k = max(1, ceil(q·n)), the rank of the nearest-rank q-quantile of n values, with q·n
    computed exactly for q as written: ``repr(q)``, the shortest decimal that reads back as
    the double (the ``quantile`` label's text). The double product can round up past a whole
    number (0.0011 × 110,000 = 121.00000000000001 → rank 122, not 121)."""
    exact = Fraction(repr(q)) * n
    return max(1, math.ceil(exact))


def quantile(histogram: NativeHistogram, q: float) -> float:
    """The ``q``-quantile's estimate, 0 <= q <= 1: the observation of nearest rank
    k = max(1, ceil(q·n)) among the n observations in buckets (NaN excluded) — q·n exact, q
    taken as the decimal it is written as (:func:`nearest_rank`),
    in order (negative buckets, zero bucket, positive buckets), estimated by
    :func:`representative` (0 in the zero bucket: absolute error <= the zero threshold).
    NaN when no observation is in a bucket."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be from 0 to 1, not {q!r}")
    total = histogram.zero_count + sum(histogram.positive.values()) \
        + sum(histogram.negative.values())
    if total == 0:
        return math.nan
    rank = nearest_rank(q, total)
    seen = 0
    for index in sorted(histogram.negative, reverse=True):
        seen += histogram.negative[index]
        if seen >= rank:
            return -representative(index, histogram.schema)
    seen += histogram.zero_count
    if seen >= rank:
        return 0.0
    for index in sorted(histogram.positive):
        seen += histogram.positive[index]
        if seen >= rank:
            return representative(index, histogram.schema)
    raise AssertionError("unreachable: the ranks add up to the total")
