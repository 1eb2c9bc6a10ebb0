param n;
var x{1..n} >= 0;
minimize z: sum{i in 1..n} x[i];
end;
