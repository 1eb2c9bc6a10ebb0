var x integer >= 0, <= 10;
var y binary;
minimize cost: 10 + 2.5 * x + 4 * y;
s.t. need: x + 3 * y >= 4.5;
end;
