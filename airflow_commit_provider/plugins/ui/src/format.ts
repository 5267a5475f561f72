export const formatBytes = (n: number | null | undefined): string => {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
};

export const formatNumber = (n: number | null | undefined): string =>
  n === null || n === undefined ? "—" : n.toLocaleString("en-US");

export const formatSeconds = (s: number): string => (s < 1 ? `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms` : `${s.toFixed(2)} s`);
